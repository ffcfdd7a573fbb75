"""The cluster controller: one broker, elected through ZooKeeper, owns every partition's state
(Kafka's `KafkaController`).

Election: the first broker to create the ephemeral `/controller` znode is the controller; every
broker watches it and races again when it goes. A new controller increments `/controller_epoch`
(a conditional write) and puts its epoch in every request it sends; brokers refuse requests from
an older epoch, and every ZooKeeper write of the controller is a transaction that first checks
`/controller_epoch` is still at the version it wrote, so a controller that was paused and has
been replaced can change nothing, in ZooKeeper or on a broker. Losing the ZooKeeper session
stops a controller at once.

Work arrives as events (`weir.cluster.controller.events`) on one queue, handled in order by one
thread (`ControllerEventManager`); the requests an event causes are collected in one batch and
sent when it is done. What each event does:
- brokers coming and going (`/brokers/ids`): partitions led by a broker that went go Offline and
  get a new leader from their live ISR (`weir.cluster.elections`), followers that went leave the
  ISR; a broker that came gets a full LeaderAndIsr;
- topics created (`/brokers/topics`) or grown (a topic znode's data): their new partitions get a
  first leader and ISR;
- deletion requests (`/admin/delete_topics`): replicas are told to stop and delete, brokers to
  forget the topic, then the topic's znodes go;
- leader elections, AlterPartition, controlled shutdown and the leader balance:
  `weir.cluster.controller.leadership`;
- partition reassignment (AlterPartitionReassignments, `/admin/reassign_partitions`), resumed
  by a new controller and completed when an ISR change brings every target replica in:
  `weir.cluster.controller.reassignment`.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Any

from weir.clock import Clock, SystemClock
from weir.cluster import elections, znodes
from weir.cluster.channel import Connector, plaintext_connection
from weir.cluster.controller.batch import (
    ChannelFactory,
    ControllerBrokerRequestBatch,
    ControllerChannelManager,
    socket_channels,
)
from weir.cluster.controller.context import ControllerContext, Leadership, TopicPartition
from weir.cluster.controller.event_manager import ControllerEventManager
from weir.cluster.controller.events import (
    AlterPartitionReassignments,
    AlterPartitionReceived,
    AutoPreferredReplicaLeaderElection,
    BrokerChange,
    ControlledShutdown,
    ControllerChange,
    ControllerEvent,
    Elect,
    ElectionType,
    ElectLeaders,
    Expire,
    IsrChange,
    IsrResult,
    ListPartitionReassignments,
    PartitionModifications,
    PartitionReassignment,
    PreferredReplicaElection,
    Shutdown,
    TopicChange,
    TopicDeletion,
    WatchedEvent,
)
from weir.cluster.controller.leadership import LeaderBalance, LeadershipChanges
from weir.cluster.controller.reassignment import Reassignments
from weir.cluster.controller.state_machines import PartitionStateMachine, ReplicaStateMachine
from weir.cluster.controller.states import PartitionState, ReplicaState
from weir.cluster.controller.stats import ControllerStats
from weir.cluster.controller.zk import ControllerMovedError, ControllerZkClient
from weir.cluster.zk_client import ZooKeeper, ZooKeeperError
from weir.cluster.znodes import NO_LEADER, ZnodeFormatError

log = logging.getLogger(__package__)

RETRY_ELECTION_MS = 1000
DEFAULT_BALANCE = LeaderBalance()


class Controller:
    """Thread-safety (docs/threads.md): the public methods may be called from any thread; they only
    queue events
    (or answer at once when this broker is not the controller). Everything else runs on the
    event thread, which owns the context, the state machines and the batch. The ZooKeeper
    engine's threads only queue events, read `_generation` and `_active`, and set `_fenced` when
    the session is lost, which stops the sender threads before the next request."""

    def __init__(
        self,
        zk: ZooKeeper,
        node_id: int,
        *,
        clock: Clock | None = None,
        request_timeout_s: float = 30.0,
        unclean_leader_election: bool = False,
        balance: LeaderBalance = DEFAULT_BALANCE,
        listener: str | None = None,
        connect: Connector = plaintext_connection,
        channels: ChannelFactory | None = None,
    ) -> None:
        self.node_id = node_id
        self._zk = zk
        self._zk_client = ControllerZkClient(zk)
        self._clock: Clock = clock or SystemClock()
        self._unclean_default = unclean_leader_election
        self._balance = balance
        self.context = ControllerContext()
        self._events = ControllerEventManager(self._handle, self._clock,
                                              stats=self.context.stats)  # fmt: skip
        self._active = False
        self._generation = 0
        self._fenced = threading.Event()
        self.controller_id: int | None = None
        self._channels = ControllerChannelManager(
            channels or socket_channels(request_timeout_s, connect), listener, self._is_current
        )
        self._batch = ControllerBrokerRequestBatch(node_id, self.context, self._channels, listener)
        self._partitions = PartitionStateMachine(self.context, self._zk_client, self._batch)
        self._replicas = ReplicaStateMachine(self.context, self._batch)
        self._leadership = LeadershipChanges(self.context, self._partitions, self._zk_client,
                                         balance, self._schedule_balance_check)  # fmt: skip
        self._reassignments = Reassignments(self.context, self._partitions, self._replicas,
                                            self._zk_client)  # fmt: skip

    @property
    def active(self) -> bool:
        return self._active

    @property
    def stats(self) -> ControllerStats:
        return self.context.stats

    @property
    def event_queue_size(self) -> int:
        return self._events.queue_size

    @property
    def epoch(self) -> int:
        return self.context.epoch

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Listen to the session and `/controller`, and start the event thread."""
        self._listen()
        self._events.start()

    def start_without_thread(self) -> None:
        """`start`, with events handled only by `process_pending` (tests and benches)."""
        self._listen()

    def _listen(self) -> None:
        self._zk.add_session_listener(self._on_session)
        self._zk.watch_data(znodes.CONTROLLER, self._on_controller_znode)

    def stop(self) -> None:
        self._events.put(Shutdown())
        self._events.join(timeout_s=10)

    def process_pending(self) -> int:
        """Handle the queued events on this thread (when started without a thread)."""
        return self._events.process_pending()

    def _on_session(self, event: str) -> None:
        if event == "lost":
            self._fenced.set()
            self._events.clear_and_put(Expire())
        elif event == "registered":
            self._events.put(Elect())

    def _on_controller_znode(self, data: bytes | None, _stat: Any) -> None:
        if data is None:
            self._events.put(ControllerChange(None))
            return
        try:
            self._events.put(ControllerChange(znodes.parse_controller(data)))
        except ZnodeFormatError as exc:
            log.warning("%s; waiting for it to go", exc)

    def _is_current(self) -> bool:
        return self._active and not self._fenced.is_set()

    # ---- requests from brokers -------------------------------------------------------------------

    def elect_leaders(
        self, election_type: int, partitions: list[TopicPartition] | None
    ) -> concurrent.futures.Future[dict[TopicPartition, int] | None]:
        """ElectLeaders: a preferred (0) or unclean (1) election for `partitions` (None: all).
        The future's result: an error code per partition (NONE when elected), or None if this
        broker is not the controller."""
        wanted = None if partitions is None else tuple(partitions)
        return self._request(ElectLeaders(ElectionType(election_type), wanted))

    def alter_partition(
        self, broker_id: int, broker_epoch: int, changes: list[IsrChange]
    ) -> concurrent.futures.Future[list[IsrResult] | None]:
        """Apply leaders' ISR changes on the controller's thread. The future's result: one
        result per change, or None if this broker is not the controller."""
        return self._request(AlterPartitionReceived(broker_id, broker_epoch, tuple(changes)))

    def controlled_shutdown(
        self, broker_id: int, broker_epoch: int
    ) -> concurrent.futures.Future[tuple[int, list[TopicPartition]] | None]:
        """Move leadership away from a broker that is stopping. The future's result: (error
        code, partitions it still leads), or None if this broker is not the controller."""
        return self._request(ControlledShutdown(broker_id, broker_epoch))

    def alter_partition_reassignments(
        self, targets: dict[TopicPartition, tuple[int, ...] | None]
    ) -> concurrent.futures.Future[dict[TopicPartition, tuple[int, str | None]] | None]:
        """Start, replace or (None) cancel partition moves. The future's result: (error code,
        message) per partition, or None if this broker is not the controller."""
        return self._request(AlterPartitionReassignments(tuple(targets.items())))

    def list_partition_reassignments(
        self, partitions: list[TopicPartition] | None
    ) -> concurrent.futures.Future[dict[TopicPartition, tuple[tuple[int, ...], ...]] | None]:
        """The moves under way (of `partitions`, if named). The future's result: (replicas,
        adding, removing) per partition, or None if this broker is not the controller."""
        wanted = None if partitions is None else tuple(partitions)
        return self._request(ListPartitionReassignments(wanted))

    def _request(self, event: ElectLeaders | AlterPartitionReceived | ControlledShutdown
                 | AlterPartitionReassignments | ListPartitionReassignments
                 ) -> concurrent.futures.Future[Any]:  # fmt: skip
        if self._active:
            self._events.put(event)
        else:
            event.preempt()
        return event.reply

    def imbalanced_partitions(self) -> list[TopicPartition]:
        """Partitions to move back to their preferred leader now (`elections.imbalanced`)."""
        return self._leadership.imbalanced_partitions()

    # ---- the event loop --------------------------------------------------------------------------

    def _handle(self, event: ControllerEvent) -> None:
        try:
            self._process(event)
            if self._active:
                self._batch.send()
        except ControllerMovedError as exc:
            log.warning("controller epoch %d is over: %s", self.context.epoch, exc)
            self._resign()
        except ZooKeeperError as exc:
            log.warning("controller event %s failed on ZooKeeper: %r", type(event).__name__, exc)
            if self._active:
                self._resign()
                self._clock.sleep_ms(RETRY_ELECTION_MS)
                self._events.put(Elect())
        finally:
            self._batch.clear()
            event.preempt()

    def _process(self, event: ControllerEvent) -> None:
        match event:
            case Shutdown() | Expire():
                self._resign()
            case Elect():
                self._elect()
            case ControllerChange(controller_id=controller_id):
                self.controller_id = controller_id
                if controller_id is None:
                    self._elect()
            case _ if not self._active:
                event.preempt()
            case WatchedEvent(generation=generation) if generation != self._generation:
                pass  # watched in an earlier controllership
            case BrokerChange():
                self._on_broker_change()
            case TopicChange():
                self._on_topic_change()
            case PartitionModifications(topic=topic):
                self._on_partition_modifications(topic)
            case TopicDeletion():
                self._on_topic_deletion()
            case PreferredReplicaElection():
                self._leadership.on_preferred_replica_election()
            case PartitionReassignment():
                self._reassignments.on_request_znode()
            case AutoPreferredReplicaLeaderElection():
                self._leadership.on_balance_check()
            case ElectLeaders(election_type=kind, partitions=partitions, reply=reply):
                reply.set_result(self._leadership.elect_leaders(kind, partitions))
            case AlterPartitionReceived(broker_id=broker, broker_epoch=epoch, changes=changes,
                                        reply=reply):  # fmt: skip
                results = self._leadership.alter_partition(broker, epoch, changes)
                reply.set_result(results)
                self._reassignments.maybe_complete(
                    (r.topic, r.index) for r in results if r.state is not None
                )
            case AlterPartitionReassignments(targets=targets, reply=reply):
                outcomes = self._reassignments.alter(dict(targets))
                reply.set_result({tp: (int(code), message)
                                  for tp, (code, message) in outcomes.items()})  # fmt: skip
            case ListPartitionReassignments(partitions=partitions, reply=reply):
                ongoing = self._reassignments.ongoing(partitions)
                reply.set_result({tp: (a.replicas, a.adding, a.removing)
                                  for tp, a in ongoing.items()})  # fmt: skip
            case ControlledShutdown(broker_id=broker, broker_epoch=epoch, reply=reply):
                reply.set_result(self._leadership.controlled_shutdown(broker, epoch))

    # ---- election --------------------------------------------------------------------------------

    def _elect(self) -> None:
        if self._active:
            return
        epoch = self._zk_client.register_controller(self.node_id, self._clock.milliseconds())
        if epoch is None:
            return  # another broker is the controller; the data watch calls again when it goes
        self._fenced.clear()
        self._active = True
        self._generation += 1
        self.controller_id = self.node_id
        self.context.epoch = epoch
        self.context.epoch_zk_version = self._zk_client.epoch_zk_version
        self._schedule_balance_check()
        log.info("broker %d is the controller (epoch %d)", self.node_id, epoch)
        self._on_become_controller()

    def _resign(self) -> None:
        was_active = self._active
        if was_active and self._fenced.is_set():
            log.warning("broker %d is no longer the controller: it lost its ZooKeeper session",
                        self.node_id)  # fmt: skip
        self._active = False
        self._generation += 1
        self._channels.close()
        self._batch.clear()
        self.context.reset()
        self._events.cancel_timer()
        if was_active:
            log.info("broker %d is no longer the controller", self.node_id)
            self._zk_client.delete_controller_znode()

    def _schedule_balance_check(self) -> None:
        if self._balance.enabled:
            self._events.schedule(AutoPreferredReplicaLeaderElection(self._generation),
                                  int(self._balance.check_interval_s * 1000))  # fmt: skip

    def _watch(self, make: Callable[[int], ControllerEvent]) -> Callable[..., bool]:
        """A watch callback that queues `make(generation)` while this controllership lasts."""
        generation = self._generation

        def changed(*_: Any) -> bool:
            if generation != self._generation or not self._active:
                return False
            self._events.put(make(generation))
            return True

        return changed

    def _on_become_controller(self) -> None:
        context = self.context
        context.live_brokers = self._zk_client.live_brokers()
        for registration in context.live_brokers.values():
            self._channels.add_broker(registration)
        for name in self._zk_client.topic_names():
            self._load_topic(name)
        self._partitions.initialize(context.partitions())
        self._replicas.initialize(context.partitions())
        self._zk.watch_children(znodes.BROKER_IDS, self._watch(BrokerChange))
        self._zk.watch_children(znodes.BROKER_TOPICS, self._watch(TopicChange))
        self._zk.watch_children(znodes.DELETE_TOPICS, self._watch(TopicDeletion))
        self._zk.watch_data(znodes.PREFERRED_REPLICA_ELECTION,
                            self._watch(PreferredReplicaElection))  # fmt: skip
        self._zk.watch_data(znodes.REASSIGN_PARTITIONS, self._watch(PartitionReassignment))
        self._start_partitions(context.without_leadership())
        self._apply_live_set()
        for node_id in context.live_brokers:
            self._batch.add_full_leader_and_isr(node_id)
        self._batch.add_update_metadata(context.live_brokers, list(context.leadership))
        self._reassignments.resume()

    # ---- topics ----------------------------------------------------------------------------------

    def _load_topic(self, name: str) -> list[TopicPartition]:
        """Read a topic's assignment and the states of its partitions not known before; those
        partitions (none if the topic is not (yet) readable)."""
        assignment = self._zk_client.topic_assignment(name)
        if assignment is None:
            return []
        first = name not in self.context.assignments
        new = self.context.add_topic(assignment)
        for tp in new:
            loaded = self._zk_client.partition_state(tp)
            if loaded is not None:
                self.context.leadership[tp] = Leadership(*loaded)
        if first:
            self._zk.watch_data(znodes.topic_path(name),
                                self._watch(lambda g: PartitionModifications(g, name)))  # fmt: skip
        return new

    def _adopt(self, partitions: list[TopicPartition]) -> None:
        """Partitions that came with a topic change: New, and on from there if they already
        have a leader and ISR."""
        self._partitions.transition(partitions, PartitionState.NEW)
        self._replicas.transition(self._replicas.on_partitions(partitions), ReplicaState.NEW)
        led = [tp for tp in partitions if tp in self.context.leadership]
        self._partitions.initialize(led)
        self._replicas.start(led)

    def _on_topic_change(self) -> None:
        names = set(self._zk_client.topic_names())
        for name in sorted(names - set(self.context.assignments)):
            new = self._load_topic(name)
            self._adopt(new)
            self._start_partitions([tp for tp in new if tp not in self.context.leadership],
                                   is_new=True)  # fmt: skip

    def _on_partition_modifications(self, topic: str) -> None:
        if topic not in self.context.assignments:
            return
        self._adopt(self._load_topic(topic))
        wanted = [tp for tp in self.context.without_leadership() if tp[0] == topic]
        self._start_partitions(wanted, is_new=True)

    def _start_partitions(self, partitions: list[TopicPartition], *, is_new: bool = False
                          ) -> set[TopicPartition]:  # fmt: skip
        """A first leader and ISR for new partitions (NewPartition -> OnlinePartition)."""
        states = {}
        for tp in partitions:
            replicas = self.context.replicas(tp)
            state = elections.new_partition_state(replicas, self.context.live_brokers,
                                                  self.context.epoch)  # fmt: skip
            if state is None:
                log.warning("%s-%d: none of its replicas %s is live yet", *tp, list(replicas))
                continue
            states[tp] = state
        written = self._partitions.write_leadership(states, create=True, is_new=is_new)
        self._replicas.start(written)
        return written

    def _on_topic_deletion(self) -> None:
        for name in self._zk_client.topics_to_delete():
            self._delete_topic(name)

    def _delete_topic(self, name: str) -> None:
        partitions = self.context.partitions_of(name)
        if name in self.context.assignments:
            self._batch.add_update_metadata(self.context.live_brokers, partitions, deleting=True)
            self._replicas.delete(partitions)
            self._partitions.transition(partitions, PartitionState.OFFLINE)
            self._partitions.transition(partitions, PartitionState.NON_EXISTENT)
            self.context.remove_topic(name)
        self._zk_client.delete(znodes.topic_path(name), recursive=True)
        self._zk_client.delete(znodes.topic_config_path(name))
        self._zk_client.delete(znodes.delete_request_path(name))
        log.info("topic %s deleted", name)

    # ---- brokers ---------------------------------------------------------------------------------

    def _on_broker_change(self) -> None:
        context = self.context
        current = self._zk_client.live_brokers()
        gone = {n for n, b in context.live_brokers.items() if current.get(n) != b}
        new = {n for n, b in current.items() if context.live_brokers.get(n) != b}
        if not gone and not new:
            return
        for node_id in gone:
            self._channels.remove_broker(node_id)
        context.live_brokers = current
        context.shutting_down &= set(current) - new
        for node_id in new:
            self._channels.add_broker(current[node_id])
        log.info("live brokers %s (gone: %s, new: %s)", sorted(current), sorted(gone),
                 sorted(new))  # fmt: skip
        self._on_brokers_gone(gone, dead=gone - set(current))
        self._start_partitions(context.without_leadership())
        self._apply_live_set()
        self._replicas.start([tp for tp in context.leadership if set(context.replicas(tp)) & new])
        for node_id in new:
            self._batch.add_full_leader_and_isr(node_id)
        self._batch.add_update_metadata(current, list(context.leadership))
        self._reassignments.maybe_complete(context.reassigning())

    def _on_brokers_gone(self, gone: set[int], dead: set[int]) -> None:
        """Replicas on brokers that went are Offline, and partitions led by one that is gone
        for good are Offline until a leader is elected."""
        partitions = self.context.partitions()
        self._replicas.transition(self._replicas.on_partitions(partitions, gone),
                                  ReplicaState.OFFLINE)  # fmt: skip
        leaderless = [tp for tp, led in self.context.leadership.items()
                      if led.state.leader in dead
                      and self._partitions.state(tp) is PartitionState.ONLINE]  # fmt: skip
        self._partitions.transition(leaderless, PartitionState.OFFLINE)

    def _apply_live_set(self) -> set[TopicPartition]:
        """New leaders and ISRs for the live broker set (OfflinePartition -> OnlinePartition
        where a replica may lead); the partitions that changed."""
        context = self.context
        live = context.live_brokers
        unclean: dict[str, bool] = {}
        states = {}
        for tp, leadership in context.leadership.items():
            state = leadership.state
            allow = state.leader not in live and not any(r in live for r in state.isr)
            if allow and tp[0] not in unclean:
                unclean[tp[0]] = self._unclean(tp[0])
            changed = elections.after_live_change(
                state, context.replicas(tp), live, context.epoch,
                unclean=allow and unclean[tp[0]],
            )  # fmt: skip
            if changed is not None:
                states[tp] = changed
                if changed.leader == NO_LEADER:
                    log.warning("%s-%d is offline: no live in-sync replica", *tp)
        return self._partitions.write_leadership(states)

    def _unclean(self, topic: str) -> bool:
        value = self._zk_client.topic_configs(topic).get("unclean.leader.election.enable")
        return self._unclean_default if value is None else value.lower() == "true"
