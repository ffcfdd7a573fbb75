"""The cluster controller: one broker, elected through ZooKeeper, owns every partition's state.

Election: the first broker to create the ephemeral `/controller` znode is the controller; every
broker watches it and races again when it goes. A new controller increments `/controller_epoch`
(a conditional write) and puts its epoch in every request it sends; brokers refuse requests from
an older epoch, and every ZooKeeper write of the controller is a transaction that first checks
`/controller_epoch` is still at the version it wrote, so a controller that was paused and has
been replaced can change nothing, in ZooKeeper or on a broker. Losing the ZooKeeper session
stops a controller at once.

Work arrives as events on one queue, handled in order by one thread (as Kafka's controller does):
- brokers coming and going (`/brokers/ids`): partitions led by a broker that went get a new leader
  from their live ISR (`weir.cluster.elections`), followers that went leave the ISR;
- topics created (`/brokers/topics`) or grown (a topic znode's data): their new partitions get a
  first leader and ISR;
- deletion requests (`/admin/delete_topics`): replicas are told to stop and delete, brokers to
  forget the topic, then the topic's znodes go;
- leader elections asked for by an admin (`/admin/preferred_replica_election`, or ElectLeaders
  through any broker): preferred ones move a partition's leadership back to its first replica
  when that is live and in the ISR; unclean ones give a leaderless partition any live replica;
- the leader balance (`auto.leader.rebalance.enable`): every
  `leader.imbalance.check.interval.seconds`, a broker that leads fewer than
  (100 - `leader.imbalance.per.broker.percentage`)% of the partitions it is preferred for gets
  them back, as Kafka's controller does.
Each change of partition state is written to ZooKeeper first (conditionally, by zkVersion) and
then sent: LeaderAndIsr to the partition's replicas, UpdateMetadata to every live broker.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from weir.cluster import elections, znodes
from weir.cluster.channel import BrokerChannel, Connector, plaintext_connection
from weir.cluster.requests import (
    LEADER_AND_ISR_VERSION,
    STOP_REPLICA_VERSION,
    UPDATE_METADATA_VERSION,
    leader_and_isr_request,
    stop_replica_request,
    update_metadata_request,
)
from weir.cluster.znodes import (
    NO_LEADER,
    BrokerRegistration,
    PartitionState,
    TopicAssignment,
    ZnodeFormatError,
)
from weir.cluster.zookeeper import ZooKeeperMetadataStore

log = logging.getLogger(__name__)

#: the answer of a broker whose authorizer refuses the controller's requests
CLUSTER_AUTHORIZATION_FAILED = 31
#: UpdateMetadata's leader for a partition being deleted (Kafka's LeaderDuringDelete)
LEADER_DURING_DELETE = -2
LEADER_AND_ISR = 4
STOP_REPLICA = 5
UPDATE_METADATA = 6
RETRY_ELECTION_S = 1.0
# ElectLeaders' election types
PREFERRED, UNCLEAN = 0, 1
# Kafka's error codes for AlterPartition
UNKNOWN_TOPIC_OR_PARTITION = 3
FENCED_LEADER_EPOCH = 74
STALE_BROKER_EPOCH = 77
BROKER_NOT_AVAILABLE = 8
INVALID_UPDATE_VERSION = 95
INELIGIBLE_REPLICA = 107
# ... and ElectLeaders
NONE = 0
PREFERRED_LEADER_NOT_AVAILABLE = 80
ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
ELECTION_NOT_NEEDED = 84

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class IsrChange:
    """A leader's proposed ISR for one partition (AlterPartition)."""

    topic: str
    index: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class IsrResult:
    topic: str
    index: int
    error_code: int
    state: PartitionState | None = None
    partition_epoch: int = -1


@dataclass(frozen=True, slots=True)
class LeaderBalance:
    """`auto.leader.rebalance.enable`, `leader.imbalance.check.interval.seconds` and
    `leader.imbalance.per.broker.percentage`."""

    enabled: bool = True
    check_interval_s: float = 300.0
    per_broker_percentage: int = 10


class ControllerMovedError(Exception):
    """Another broker is the controller now: this one's writes were refused."""


@dataclass(slots=True)
class _Partition:
    state: PartitionState
    zk_version: int


class Controller:
    def __init__(
        self,
        store: ZooKeeperMetadataStore,
        node_id: int,
        *,
        request_timeout_s: float = 30.0,
        unclean_leader_election: bool = False,
        balance: LeaderBalance = LeaderBalance(),
        listener: str | None = None,
        connect: Connector = plaintext_connection,
    ) -> None:
        self._store = store
        #: the inter-broker listener: the controller reaches brokers on it (None: host:port)
        self._listener = listener
        self._connect = connect
        self._zk = store.client
        self.node_id = node_id
        self._request_timeout_s = request_timeout_s
        self._unclean_default = unclean_leader_election
        self._balance = balance
        self._next_balance_check = float("inf")
        self._events: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="weir-controller", daemon=True)
        self._active = False
        self._generation = 0
        self.epoch = 0
        self._epoch_version = -1
        self._brokers: dict[int, BrokerRegistration] = {}
        self._assignments: dict[str, TopicAssignment] = {}
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._channels: dict[int, BrokerChannel] = {}
        #: brokers that asked to shut down: they lead nothing new until they are gone
        self._shutting_down: set[int] = set()
        self.controller_id: int | None = None

    @property
    def active(self) -> bool:
        return self._active

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self._store.add_session_listener(self._on_session)
        self._thread.start()
        DataWatch(self._zk, znodes.CONTROLLER, self._on_controller_znode)

    def stop(self) -> None:
        self._events.put(("stop",))
        self._thread.join(timeout=10)

    def _on_session(self, event: str) -> None:
        if event == "lost":
            if self._active:
                log.warning(
                    "broker %d is no longer the controller: it lost its ZooKeeper session",
                    self.node_id,
                )
            self._active = False  # at once: the sender threads check it before every request
            self._events.put(("resign",))
        elif event == "registered":
            self._events.put(("elect",))

    def _on_controller_znode(self, data: bytes | None, stat: Any) -> None:
        if data is None:
            self.controller_id = None
            self._events.put(("elect",))
            return
        try:
            self.controller_id = znodes.parse_controller(data)
        except ZnodeFormatError as exc:
            log.warning("%s; waiting for it to go", exc)

    def _watch(self, kind: str, generation: int, *extra: Any) -> Any:
        """A watch callback that queues `kind` while this controllership lasts."""

        def changed(*_: Any) -> bool:
            if generation != self._generation or not self._active:
                return False
            self._events.put((kind, *extra))
            return True

        return changed

    def _run(self) -> None:
        while True:
            try:
                event = self._events.get(timeout=self._until_balance_check())
            except queue.Empty:
                event = ("balance_check",)
            kind = event[0]
            if kind == "stop":
                self._resign()
                return
            try:
                if kind == "elect":
                    self._elect()
                elif kind == "resign":
                    self._resign()
                elif self._active:
                    getattr(self, f"_on_{kind}")(*event[1:])
                else:
                    _answer_not_controller(event)
            except ControllerMovedError as exc:
                log.warning("controller epoch %d is over: %s", self.epoch, exc)
                self._resign()
            except KazooException as exc:
                log.warning("controller event %s failed on ZooKeeper: %r", kind, exc)
                if self._active:
                    self._resign()
                    time.sleep(RETRY_ELECTION_S)
                    self._events.put(("elect",))
            except Exception:
                log.exception("controller event %s failed", kind)

    # ---- election --------------------------------------------------------------------------------

    def _elect(self) -> None:
        if self._active:
            return
        try:
            self._zk.create(
                znodes.CONTROLLER,
                znodes.encode_controller(self.node_id, int(time.time() * 1000)),
                ephemeral=True,
            )
        except NodeExistsError:
            return  # another broker is the controller; the data watch calls again when it goes
        try:
            self._increment_epoch()
        except ControllerMovedError:
            self._delete_own_controller_znode()
            return
        self._active = True
        self._generation += 1
        self.controller_id = self.node_id
        self._schedule_balance_check()
        log.info("broker %d is the controller (epoch %d)", self.node_id, self.epoch)
        self._become_controller()

    def _increment_epoch(self) -> None:
        while True:
            try:
                data, stat = self._zk.get(znodes.CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    self._zk.create(znodes.CONTROLLER_EPOCH, b"1")
                except NodeExistsError:
                    continue
                self.epoch, self._epoch_version = 1, 0
                return
            epoch = znodes.parse_controller_epoch(data) + 1
            try:
                written = self._zk.set(
                    znodes.CONTROLLER_EPOCH, str(epoch).encode(), version=stat.version
                )
            except BadVersionError:
                raise ControllerMovedError("another controller took the epoch first") from None
            self.epoch, self._epoch_version = epoch, written.version
            return

    def _resign(self) -> None:
        was_active = self._active
        self._active = False
        self._generation += 1
        for channel in self._channels.values():
            channel.stop()
        self._channels.clear()
        self._brokers.clear()
        self._assignments.clear()
        self._partitions.clear()
        self._shutting_down.clear()
        self._next_balance_check = float("inf")
        if was_active:
            log.info("broker %d is no longer the controller", self.node_id)
            self._delete_own_controller_znode()

    def _delete_own_controller_znode(self) -> None:
        try:
            _, stat = self._zk.get(znodes.CONTROLLER)
            if stat.ephemeralOwner == self._store.session_id:
                self._zk.delete(znodes.CONTROLLER, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass
        except KazooException as exc:
            log.info("could not remove the controller znode: %s", exc)

    def _become_controller(self) -> None:
        generation = self._generation
        self._brokers = self._store.live_brokers()
        for registration in self._brokers.values():
            self._open_channel(registration)
        for name in self._zk.get_children(znodes.BROKER_TOPICS):
            self._load_topic(name, generation)
        ChildrenWatch(self._zk, znodes.BROKER_IDS, self._watch("brokers", generation),
                      send_event=False)  # fmt: skip
        ChildrenWatch(self._zk, znodes.BROKER_TOPICS, self._watch("topics", generation))
        ChildrenWatch(self._zk, znodes.DELETE_TOPICS, self._watch("deletes", generation))
        DataWatch(self._zk, znodes.PREFERRED_REPLICA_ELECTION,
                  self._watch("preferred_election", generation))  # fmt: skip
        DataWatch(self._zk, znodes.REASSIGN_PARTITIONS,
                  self._watch("reassignment_request", generation))  # fmt: skip
        self._start_new_partitions(self._partitions_without_state())
        self._apply_live_set()
        for node_id in self._brokers:
            self._send_leader_and_isr(node_id, self._replicated_by(node_id), full=True)
        self._send_update_metadata(self._brokers, list(self._partitions))

    # ---- topics ----------------------------------------------------------------------------------

    def _load_topic(self, name: str, generation: int) -> bool:
        """Read a topic's assignment and partition states; False if it is not (yet) readable."""
        try:
            data, _ = self._zk.get(znodes.topic_path(name))
            assignment = znodes.parse_assignment(name, data)
        except NoNodeError:
            return False
        except ZnodeFormatError as exc:
            log.warning("ignoring topic %s: %s", name, exc)
            return False
        first = name not in self._assignments
        self._assignments[name] = assignment
        for index in assignment.partitions:
            if (name, index) in self._partitions:
                continue
            try:
                data, stat = self._zk.get(znodes.state_path(name, index))
            except NoNodeError:
                continue
            try:
                state = znodes.parse_state(name, index, data)
            except ZnodeFormatError as exc:
                log.warning("ignoring the state of %s-%d: %s", name, index, exc)
                continue
            self._partitions[(name, index)] = _Partition(state, stat.version)
        if first:
            DataWatch(self._zk, znodes.topic_path(name), self._watch("topic", generation, name))
        return True

    def _partitions_without_state(self) -> list[TopicPartition]:
        return [
            (name, index)
            for name, assignment in self._assignments.items()
            for index in assignment.partitions
            if (name, index) not in self._partitions
        ]

    def _on_topics(self) -> None:
        names = set(self._zk.get_children(znodes.BROKER_TOPICS))
        new = sorted(names - set(self._assignments))
        for name in new:
            self._load_topic(name, self._generation)
        self._start_topics(new)

    def _on_topic(self, name: str) -> None:
        if name not in self._assignments:
            return
        self._load_topic(name, self._generation)
        self._start_topics([name])

    def _start_topics(self, names: Iterable[str]) -> None:
        wanted = set(names)
        new = [tp for tp in self._partitions_without_state() if tp[0] in wanted]
        started = self._start_new_partitions(new)
        if not started:
            return
        for node_id in self._brokers:
            self._send_leader_and_isr(node_id, [tp for tp in started if self._replica(node_id, tp)],
                                      is_new=True)  # fmt: skip
        self._send_update_metadata(self._brokers, sorted(started))

    def _start_new_partitions(self, partitions: list[TopicPartition]) -> set[TopicPartition]:
        states = {}
        for tp in partitions:
            replicas = self._assignments[tp[0]].partitions[tp[1]]
            state = elections.new_partition_state(replicas, self._brokers, self.epoch)
            if state is None:
                log.warning("%s-%d: none of its replicas %s is live yet", *tp, list(replicas))
                continue
            states[tp] = state
        return self._write_states(states, create=True)

    def _on_deletes(self) -> None:
        for name in sorted(self._zk.get_children(znodes.DELETE_TOPICS)):
            self._delete_topic(name)

    def _delete_topic(self, name: str) -> None:
        assignment = self._assignments.get(name)
        if assignment is not None:
            partitions = [(name, index) for index in assignment.partitions]
            for node_id in self._brokers:
                mine = [tp for tp in partitions if self._replica(node_id, tp)]
                if mine:
                    self._channel_send(node_id, STOP_REPLICA, STOP_REPLICA_VERSION,
                                       stop_replica_request(self.node_id, self.epoch,
                                                            self._brokers[node_id].epoch,
                                                            mine, delete=True))  # fmt: skip
            self._send_update_metadata(self._brokers, partitions, deleting=True)
            for tp in partitions:
                self._partitions.pop(tp, None)
            del self._assignments[name]
        self._fenced_delete([znodes.topic_path(name)], recursive=True)
        self._fenced_delete([znodes.topic_config_path(name)])
        self._fenced_delete([znodes.delete_request_path(name)])
        log.info("topic %s deleted", name)

    def _fenced_delete(self, paths: list[str], *, recursive: bool = False) -> None:
        for path in paths:
            if recursive:
                try:
                    children = self._zk.get_children(path)
                except NoNodeError:
                    continue
                self._fenced_delete([f"{path}/{child}" for child in children], recursive=True)
            transaction = self._zk.transaction()
            transaction.check(znodes.CONTROLLER_EPOCH, self._epoch_version)
            transaction.delete(path)
            results = transaction.commit()
            if _epoch_check_failed(results):
                raise ControllerMovedError("the controller epoch changed")
            failure = results[1]
            if isinstance(failure, Exception) and not isinstance(failure, NoNodeError):
                if isinstance(failure, NotEmptyError):
                    self._fenced_delete([path], recursive=True)
                    continue
                raise failure

    # ---- ISR changes from leaders (AlterPartition) -----------------------------------------------

    def alter_partition(
        self, broker_id: int, broker_epoch: int, changes: list[IsrChange]
    ) -> concurrent.futures.Future[list[IsrResult] | None]:
        """Apply leaders' ISR changes on the controller's thread. The future's result: one
        result per change, or None if this broker is not the controller."""
        future: concurrent.futures.Future[list[IsrResult] | None] = concurrent.futures.Future()
        if not self._active:
            future.set_result(None)
        else:
            self._events.put(("alter_partition", broker_id, broker_epoch, changes, future))
        return future

    def _on_alter_partition(
        self,
        broker_id: int,
        broker_epoch: int,
        changes: list[IsrChange],
        future: concurrent.futures.Future[list[IsrResult] | None],
    ) -> None:
        try:
            results = self._alter_partition(broker_id, broker_epoch, changes)
        except BaseException:
            future.set_result(None)  # answered NOT_CONTROLLER: the leader asks again
            raise
        future.set_result(results)

    def _alter_partition(
        self, broker_id: int, broker_epoch: int, changes: list[IsrChange]
    ) -> list[IsrResult]:
        registration = self._brokers.get(broker_id)
        if registration is None or broker_epoch not in (-1, registration.epoch):
            return [IsrResult(c.topic, c.index, STALE_BROKER_EPOCH) for c in changes]
        results: dict[TopicPartition, IsrResult] = {}
        states = {}
        for change in changes:
            tp = (change.topic, change.index)
            partition = self._partitions.get(tp)
            if partition is None:
                results[tp] = IsrResult(*tp, UNKNOWN_TOPIC_OR_PARTITION)
                continue
            state = partition.state
            if state.leader != broker_id or change.leader_epoch != state.leader_epoch:
                results[tp] = IsrResult(*tp, FENCED_LEADER_EPOCH)
                continue
            if change.partition_epoch != partition.zk_version:
                results[tp] = IsrResult(*tp, INVALID_UPDATE_VERSION)
                continue
            replicas = self._assignments[tp[0]].partitions[tp[1]]
            isr = tuple(r for r in replicas if r in change.isr)
            if set(change.isr) - set(replicas) or any(r not in self._brokers for r in isr):
                results[tp] = IsrResult(*tp, INELIGIBLE_REPLICA)
                continue
            states[tp] = PartitionState(
                leader=state.leader, leader_epoch=state.leader_epoch, isr=isr,
                controller_epoch=self.epoch,
            )  # fmt: skip
        written = self._write_states(states, create=False)
        for tp in states:
            partition = self._partitions.get(tp)
            if tp in written and partition is not None:
                results[tp] = IsrResult(*tp, 0, partition.state, partition.zk_version)
                log.info("%s-%d: ISR now %s", *tp, list(partition.state.isr))
            else:
                results[tp] = IsrResult(*tp, INVALID_UPDATE_VERSION)
        if written:
            self._send_update_metadata(self._brokers, sorted(written))
        return [results[(c.topic, c.index)] for c in changes]

    # ---- controlled shutdown ---------------------------------------------------------------------

    def controlled_shutdown(
        self, broker_id: int, broker_epoch: int
    ) -> concurrent.futures.Future[tuple[int, list[TopicPartition]] | None]:
        """Move leadership away from a broker that is stopping. The future's result: (error
        code, partitions it still leads), or None if this broker is not the controller."""
        future: concurrent.futures.Future[tuple[int, list[TopicPartition]] | None]
        future = concurrent.futures.Future()
        if not self._active:
            future.set_result(None)
        else:
            self._events.put(("controlled_shutdown", broker_id, broker_epoch, future))
        return future

    def _on_controlled_shutdown(
        self,
        broker_id: int,
        broker_epoch: int,
        future: concurrent.futures.Future[tuple[int, list[TopicPartition]] | None],
    ) -> None:
        try:
            future.set_result(self._controlled_shutdown(broker_id, broker_epoch))
        except BaseException:
            if not future.done():
                future.set_result(None)
            raise

    def _controlled_shutdown(
        self, broker_id: int, broker_epoch: int
    ) -> tuple[int, list[TopicPartition]]:
        registration = self._brokers.get(broker_id)
        if registration is None:
            return BROKER_NOT_AVAILABLE, []
        if broker_epoch not in (-1, registration.epoch):
            return STALE_BROKER_EPOCH, []
        self._shutting_down.add(broker_id)
        eligible = set(self._brokers) - self._shutting_down
        states = {}
        for tp, partition in self._partitions.items():
            replicas = self._assignments[tp[0]].partitions[tp[1]]
            if broker_id not in replicas:
                continue
            state = partition.state
            isr = tuple(r for r in state.isr if r != broker_id)
            if state.leader == broker_id:
                leader = next((r for r in replicas if r in isr and r in eligible), None)
                if leader is None:
                    continue  # no other replica may lead: it stays until the broker goes
                states[tp] = PartitionState(leader=leader, leader_epoch=state.leader_epoch + 1,
                                            isr=isr, controller_epoch=self.epoch)  # fmt: skip
            elif broker_id in state.isr and isr:
                states[tp] = PartitionState(leader=state.leader,
                                            leader_epoch=state.leader_epoch + 1, isr=isr,
                                            controller_epoch=self.epoch)  # fmt: skip
        written = self._write_states(states, create=False)
        for node_id in self._brokers:
            if node_id != broker_id:
                self._send_leader_and_isr(
                    node_id, [tp for tp in written if self._replica(node_id, tp)]
                )
        if written:
            self._send_update_metadata(self._brokers, sorted(written))
        remaining = sorted(tp for tp, p in self._partitions.items() if p.state.leader == broker_id)
        log.info("broker %d is shutting down: %d partitions changed, %d still led there",
                 broker_id, len(written), len(remaining))  # fmt: skip
        return 0, remaining

    def _on_reassignment_request(self) -> None:
        """`/admin/reassign_partitions` (written by Kafka's ZooKeeper-based tools): not acted
        on, so say so rather than leave the operator waiting; the request is left in place."""
        if self._zk.exists(znodes.REASSIGN_PARTITIONS) is not None:
            log.warning("%s is not supported: partition reassignment is not implemented, the "
                        "request there is ignored (and left in place)",
                        znodes.REASSIGN_PARTITIONS)  # fmt: skip

    def _on_preferred_election(self) -> None:
        """`/admin/preferred_replica_election` (kafka-preferred-replica-election.sh's znode):
        move leadership of the listed partitions to their preferred replica when it is live and
        in the ISR, then remove the request."""
        try:
            data, _ = self._zk.get(znodes.PREFERRED_REPLICA_ELECTION)
        except NoNodeError:
            return
        try:
            wanted = znodes.parse_partition_list(data)
        except ZnodeFormatError as exc:
            log.warning("ignoring a preferred replica election request: %s", exc)
            wanted = []
        self._run_election(PREFERRED, [tp for tp in wanted if tp in self._partitions])
        self._fenced_delete([znodes.PREFERRED_REPLICA_ELECTION])

    def elect_leaders(
        self, election_type: int, partitions: list[TopicPartition] | None
    ) -> concurrent.futures.Future[dict[TopicPartition, int] | None]:
        """ElectLeaders: a preferred (0) or unclean (1) election for `partitions` (None: all).
        The future's result: an error code per partition (NONE when elected), or None if this
        broker is not the controller."""
        future: concurrent.futures.Future[dict[TopicPartition, int] | None]
        future = concurrent.futures.Future()
        if not self._active:
            future.set_result(None)
        else:
            self._events.put(("elect_leaders", election_type, partitions, future))
        return future

    def _on_elect_leaders(
        self,
        election_type: int,
        partitions: list[TopicPartition] | None,
        future: concurrent.futures.Future[dict[TopicPartition, int] | None],
    ) -> None:
        try:
            wanted = sorted(self._partitions) if partitions is None else partitions
            future.set_result(self._run_election(election_type, wanted))
        except BaseException:
            if not future.done():
                future.set_result(None)
            raise

    def _run_election(
        self, election_type: int, wanted: list[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """Run one kind of election over `wanted`; write and send the leaders that change. An
        error code per partition, as ElectLeaders answers."""
        errors: dict[TopicPartition, int] = {}
        states = {}
        for tp in wanted:
            partition = self._partitions.get(tp)
            if partition is None:
                errors[tp] = UNKNOWN_TOPIC_OR_PARTITION
                continue
            replicas = self._assignments[tp[0]].partitions[tp[1]]
            live = set(self._brokers) - self._shutting_down
            if election_type == PREFERRED:
                if replicas and partition.state.leader == replicas[0]:
                    errors[tp] = ELECTION_NOT_NEEDED
                    continue
                state = elections.preferred_leader(partition.state, replicas, live, self.epoch)
                missing = PREFERRED_LEADER_NOT_AVAILABLE
            else:
                if partition.state.leader in self._brokers:
                    errors[tp] = ELECTION_NOT_NEEDED
                    continue
                state = elections.after_live_change(
                    partition.state, replicas, live, self.epoch, unclean=True
                )
                missing = ELIGIBLE_LEADERS_NOT_AVAILABLE
            if state is None or state.leader == NO_LEADER:
                errors[tp] = missing
            else:
                states[tp] = state
        moved = self._write_states(states, create=False)
        for tp in states:
            errors[tp] = NONE if tp in moved else ELIGIBLE_LEADERS_NOT_AVAILABLE
        for node_id in self._brokers:
            self._send_leader_and_isr(node_id, [tp for tp in moved if self._replica(node_id, tp)])
        if moved:
            self._send_update_metadata(self._brokers, sorted(moved))
            kind = "preferred" if election_type == PREFERRED else "unclean"
            log.info("%s leaders elected for %d partitions", kind, len(moved))
        return errors

    # ---- leader balance --------------------------------------------------------------------------

    def _schedule_balance_check(self) -> None:
        if self._balance.enabled:
            self._next_balance_check = time.monotonic() + self._balance.check_interval_s

    def _until_balance_check(self) -> float | None:
        if self._next_balance_check == float("inf"):
            return None
        return max(0.0, self._next_balance_check - time.monotonic())

    def _on_balance_check(self) -> None:
        self._schedule_balance_check()
        imbalanced = self.imbalanced_partitions()
        if imbalanced:
            log.info("leader imbalance: moving %d partitions to their preferred leader",
                     len(imbalanced))  # fmt: skip
            self._run_election(PREFERRED, imbalanced)

    def imbalanced_partitions(self) -> list[TopicPartition]:
        """Partitions to move back to their preferred leader now (`elections.imbalanced`)."""
        return elections.imbalanced(
            {tp: (self._assignments[tp[0]].partitions[tp[1]], p.state)
             for tp, p in self._partitions.items()},
            set(self._brokers) - self._shutting_down,
            self._balance.per_broker_percentage,
        )  # fmt: skip

    # ---- brokers ---------------------------------------------------------------------------------

    def _on_brokers(self) -> None:
        current = self._store.live_brokers()
        gone = {n for n, b in self._brokers.items() if current.get(n) != b}
        new = {n for n, b in current.items() if self._brokers.get(n) != b}
        if not gone and not new:
            return
        for node_id in gone:
            channel = self._channels.pop(node_id, None)
            if channel is not None:
                channel.stop()
        self._brokers = current
        self._shutting_down &= set(current) - new
        for node_id in new:
            self._open_channel(current[node_id])
        log.info(
            "live brokers %s (gone: %s, new: %s)", sorted(current), sorted(gone), sorted(new)
        )
        changed = self._start_new_partitions(self._partitions_without_state())
        changed |= self._apply_live_set()
        for node_id in current:
            if node_id in new:
                self._send_leader_and_isr(node_id, self._replicated_by(node_id), full=True)
            else:
                self._send_leader_and_isr(
                    node_id, [tp for tp in changed if self._replica(node_id, tp)]
                )
        self._send_update_metadata(current, list(self._partitions))

    def _apply_live_set(self) -> set[TopicPartition]:
        """New leaders and ISRs for the live broker set; the partitions that changed."""
        states = {}
        for tp, partition in self._partitions.items():
            replicas = self._assignments[tp[0]].partitions[tp[1]]
            state = elections.after_live_change(
                partition.state, replicas, self._brokers, self.epoch,
                unclean=self._unclean(tp[0]),
            )  # fmt: skip
            if state is not None:
                states[tp] = state
                if state.leader == NO_LEADER:
                    log.warning("%s-%d is offline: no live in-sync replica", *tp)
        return self._write_states(states, create=False)

    def _unclean(self, topic: str) -> bool:
        info = self._store.topic(topic)
        value = info.configs.get("unclean.leader.election.enable") if info else None
        return self._unclean_default if value is None else value.lower() == "true"

    def _open_channel(self, registration: BrokerRegistration) -> None:
        old = self._channels.pop(registration.node_id, None)
        if old is not None:
            old.stop()
        generation = self._generation
        address = registration.address(self._listener)
        if address is None:
            log.warning("broker %d has no %s listener: the controller cannot reach it",
                        registration.node_id, self._listener)  # fmt: skip
            address = registration.host, registration.port
        self._channels[registration.node_id] = BrokerChannel(
            registration.node_id, *address,
            request_timeout_s=self._request_timeout_s,
            is_current=lambda: self._active and self._generation == generation,
            connect=self._connect,
        )  # fmt: skip

    # ---- writes and requests ---------------------------------------------------------------------

    def _write_states(
        self, states: dict[TopicPartition, PartitionState], *, create: bool
    ) -> set[TopicPartition]:
        """Write partition states, each in a transaction that checks the controller epoch;
        all sent before any answer is awaited. The partitions written."""
        pending = []
        for (topic, index), state in states.items():
            if create:
                self._zk.ensure_path(znodes.partition_path(topic, index))
            transaction = self._zk.transaction()
            transaction.check(znodes.CONTROLLER_EPOCH, self._epoch_version)
            if create:
                transaction.create(znodes.state_path(topic, index), znodes.encode_state(state))
            else:
                version = self._partitions[(topic, index)].zk_version
                transaction.set_data(
                    znodes.state_path(topic, index), znodes.encode_state(state), version
                )
            pending.append(((topic, index), state, transaction.commit_async()))
        written = set()
        moved = False
        for tp, state, result in pending:
            outcome = result.get()
            if _epoch_check_failed(outcome):
                moved = True
                continue
            if isinstance(outcome[1], Exception):
                log.warning("%s-%d: state not written (%r); reloading it", *tp, outcome[1])
                self._reload_state(tp)
                continue
            version = 0 if create else outcome[1].version
            self._partitions[tp] = _Partition(state, version)
            written.add(tp)
        if moved:
            raise ControllerMovedError("the controller epoch changed under a state write")
        return written

    def _reload_state(self, tp: TopicPartition) -> None:
        try:
            data, stat = self._zk.get(znodes.state_path(*tp))
            self._partitions[tp] = _Partition(znodes.parse_state(*tp, data), stat.version)
        except (NoNodeError, ZnodeFormatError):
            self._partitions.pop(tp, None)

    def _replica(self, node_id: int, tp: TopicPartition) -> bool:
        assignment = self._assignments.get(tp[0])
        return assignment is not None and node_id in assignment.partitions.get(tp[1], ())

    def _replicated_by(self, node_id: int) -> list[TopicPartition]:
        return [tp for tp in self._partitions if self._replica(node_id, tp)]

    def _partition_view(self, tp: TopicPartition, partition: _Partition) -> dict[str, Any]:
        return {
            "topic": tp[0],
            "topic_id": self._assignments[tp[0]].topic_id,
            "index": tp[1],
            "state": partition.state,
            "zk_version": partition.zk_version,
            "replicas": self._assignments[tp[0]].partitions[tp[1]],
        }

    def _send_leader_and_isr(
        self,
        node_id: int,
        partitions: list[TopicPartition],
        *,
        is_new: bool = False,
        full: bool = False,
    ) -> None:
        views = [self._partition_view(tp, self._partitions[tp]) for tp in partitions
                 if tp in self._partitions]  # fmt: skip
        if not views or node_id not in self._brokers:
            return
        leaders = {v["state"].leader for v in views}
        live_leaders = [self._brokers[n] for n in sorted(leaders) if n in self._brokers]
        body = leader_and_isr_request(
            self.node_id, self.epoch, self._brokers[node_id].epoch, views, live_leaders,
            is_new=is_new, full=full, listener=self._listener,
        )  # fmt: skip
        self._channel_send(node_id, LEADER_AND_ISR, LEADER_AND_ISR_VERSION, body,
                           self._leader_and_isr_answered(node_id))  # fmt: skip

    def _leader_and_isr_answered(self, node_id: int) -> Any:
        def answered(response: Any) -> None:
            if response.error_code == CLUSTER_AUTHORIZATION_FAILED:
                log.error("broker %d refused LeaderAndIsr: CLUSTER_AUTHORIZATION_FAILED (the "
                          "brokers' principal needs ClusterAction on the cluster: list it in "
                          "super.users)", node_id)  # fmt: skip
                return
            if response.error_code:
                log.warning("broker %d refused LeaderAndIsr: %s", node_id, response.error_code)
                return
            for topic in response.topics:
                for partition in topic.partition_errors:
                    if partition.error_code:
                        log.warning(
                            "broker %d: LeaderAndIsr for topic %s partition %d: %s",
                            node_id, topic.topic_id, partition.partition_index,
                            partition.error_code,
                        )  # fmt: skip

        return answered

    def _send_update_metadata(
        self,
        brokers: Iterable[int],
        partitions: list[TopicPartition],
        *,
        deleting: bool = False,
    ) -> None:
        views = []
        for tp in partitions:
            partition = self._partitions.get(tp)
            if partition is None:
                continue
            view = self._partition_view(tp, partition)
            if deleting:
                view["state"] = PartitionState(
                    leader=LEADER_DURING_DELETE, leader_epoch=partition.state.leader_epoch,
                    isr=partition.state.isr, controller_epoch=self.epoch,
                )  # fmt: skip
            views.append(view)
        live = list(self._brokers.values())
        for node_id in brokers:
            if node_id not in self._brokers:
                continue
            body = update_metadata_request(
                self.node_id, self.epoch, self._brokers[node_id].epoch, views, live
            )
            self._channel_send(node_id, UPDATE_METADATA, UPDATE_METADATA_VERSION, body)

    def _channel_send(
        self, node_id: int, api_key: int, version: int, body: Any, on_response: Any = None
    ) -> None:
        channel = self._channels.get(node_id)
        if channel is not None and self._active:
            channel.send(api_key, version, body, on_response)


def _epoch_check_failed(results: list[Any]) -> bool:
    """Whether a fenced transaction failed on its first operation, the check of
    `/controller_epoch` (another controller took over). When a later operation fails instead,
    kazoo reports the check as rolled back (RolledBackError), which is not a lost epoch."""
    return isinstance(results[0], (BadVersionError, NoNodeError))


def _answer_not_controller(event: tuple[Any, ...]) -> None:
    """An event that carries a broker's request, reached after this broker stopped being the
    controller: its future answers None (NOT_CONTROLLER), so the requester asks again."""
    future = event[-1]
    if isinstance(future, concurrent.futures.Future) and not future.done():
        future.set_result(None)
