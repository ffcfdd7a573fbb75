"""A broker in a cluster: its ZooKeeper registration, the controller it may become, and the
metadata the controller sends it.

`MetadataCache` is the broker's view of the cluster, replaced piece by piece by the controller's
UpdateMetadata requests (as in Kafka, not read from ZooKeeper): live brokers with their racks, the
controller, and each partition's leader, leader epoch, replicas, ISR and offline replicas. Every
broker answers Metadata from it, so all of them answer alike once the controller's requests have
arrived.

Brokers register every advertised listener; they reach each other on the inter-broker listener
(`InterBrokerSecurity`: its TLS and SASL), and clients are answered with the addresses of the
listener they connected to. SCRAM credentials (`user_configs`) and dynamic broker configs
(`broker_configs`) live in ZooKeeper.

Controller requests carry the controller's epoch; a broker remembers the newest epoch it has seen
and refuses older ones (STALE_CONTROLLER_EPOCH), and requests meant for an earlier registration
of this broker (STALE_BROKER_EPOCH).

Admin requests (create, delete, grow topics) become ZooKeeper writes that the controller carries
out; the handler then waits, up to the request's timeout, until this broker's metadata shows the
result, as Kafka's brokers do.

Thread-safety (docs/threads.md): event-loop only, except `ZooKeeperMetadataStore` and
`Controller`, which run on their own threads; their callbacks come back through
`loop.call_soon_threadsafe`, but for the session listener, which sets `broker_epoch` on kazoo's
thread.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.config import BrokerConfig
from weir.broker.fetcher import ReplicaFetchers
from weir.broker.partition import Partition
from weir.broker.peer import PeerConnection
from weir.broker.replica_manager import ReplicaManager
from weir.broker.security.inter_broker import InterBrokerSecurity
from weir.broker.security.listeners import Listener
from weir.cluster import znodes
from weir.cluster.client_quota_configs import ZooKeeperClientQuotaConfigs
from weir.cluster.controller import Controller, LeaderBalance
from weir.cluster.entity_configs import ZooKeeperEntityConfigs, ZooKeeperUserConfigs
from weir.cluster.placement import BrokerSpec, PlacementError, assign, no_broker_in_pool
from weir.cluster.requests import (
    ALTER_PARTITION_VERSION,
    CONTROLLED_SHUTDOWN_VERSION,
    alter_partition_request,
    controlled_shutdown_request,
)
from weir.cluster.zk_client import KazooZooKeeper
from weir.cluster.znodes import NO_LEADER, BrokerEndpoint, BrokerRegistration
from weir.cluster.zookeeper import ZooKeeperMetadataStore
from weir.protocol.apis import ApiKey, InterBrokerApiKey
from weir.protocol.errors import RemoteProtocolError

log = logging.getLogger(__name__)

LEADER_DURING_DELETE = -2
CONTROLLED_SHUTDOWN_BACKOFF_S = 1.0


@dataclass(frozen=True, slots=True)
class LiveBroker:
    """A broker as the controller described it: host and port on the inter-broker listener,
    and the address of each of its listeners."""

    node_id: int
    host: str
    port: int
    rack: str | None
    endpoints: Mapping[str, tuple[str, int]] = field(default_factory=dict)

    def on_listener(self, listener: str) -> LiveBroker | None:
        """This broker with host and port of `listener`; None if it has no such listener."""
        if not self.endpoints:
            return self
        address = self.endpoints.get(listener)
        return replace(self, host=address[0], port=address[1]) if address else None


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]


@dataclass(slots=True)
class MetadataCache:
    #: the inter-broker listener, whose address each LiveBroker's host and port are
    listener: str = "PLAINTEXT"
    brokers: dict[int, LiveBroker] = field(default_factory=dict)
    controller_id: int = -1
    topics: dict[str, dict[int, PartitionMetadata]] = field(default_factory=dict)
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    _waiters: list[asyncio.Future[None]] = field(default_factory=list)

    def apply(self, request: Any) -> None:
        """Take in an UpdateMetadata request (any version from 5)."""
        self.controller_id = request.controller_id
        self.brokers = {b.id_: self._live_broker(b) for b in request.live_brokers if b.endpoints}
        for topic in request.topic_states:
            name = topic.topic_name
            partitions = self.topics.setdefault(name, {})
            if getattr(topic, "topic_id", None):
                self.topic_ids[name] = topic.topic_id
            for state in topic.partition_states:
                if state.leader == LEADER_DURING_DELETE:
                    partitions.pop(state.partition_index, None)
                    continue
                partitions[state.partition_index] = PartitionMetadata(
                    leader=state.leader,
                    leader_epoch=state.leader_epoch,
                    replicas=tuple(state.replicas),
                    isr=tuple(state.isr),
                    offline_replicas=tuple(state.offline_replicas),
                )
            if not partitions:
                del self.topics[name]
                self.topic_ids.pop(name, None)
        self._wake()

    def _live_broker(self, broker: Any) -> LiveBroker:
        endpoints = {e.listener: (e.host, e.port) for e in broker.endpoints}
        host, port = endpoints.get(self.listener) or next(iter(endpoints.values()))
        return LiveBroker(broker.id_, host, port, broker.rack, endpoints)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait_until(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        """Whether `condition` held within `timeout_s`; checked after every update."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not condition():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout(remaining):
                    await waiter
            except TimeoutError:
                return condition()
        return True

    def has_leaders(self, topic: str, count: int) -> bool:
        partitions = self.topics.get(topic, {})
        return all(i in partitions and partitions[i].leader != NO_LEADER for i in range(count))


class ClusterNode:
    def __init__(self, config: BrokerConfig) -> None:
        assert config.zookeeper
        self.config = config
        self.store = ZooKeeperMetadataStore(
            config.zookeeper, session_timeout_ms=config.zookeeper_session_timeout_ms
        )
        #: how this broker connects to the others (the inter-broker listener's security)
        self.peer_security = InterBrokerSecurity.from_config(config)
        self.controller = Controller(
            KazooZooKeeper(self.store),
            config.node_id,
            request_timeout_s=config.controller_socket_timeout_ms / 1000,
            unclean_leader_election=config.log_defaults.unclean_leader_election_enable,
            balance=LeaderBalance(
                enabled=config.auto_leader_rebalance_enable,
                check_interval_s=config.leader_imbalance_check_interval_seconds,
                per_broker_percentage=config.leader_imbalance_per_broker_percentage,
            ),
            listener=config.inter_broker_listener.name,
            connect=self.peer_security.connect,
        )
        self.cache = MetadataCache(config.inter_broker_listener.name)
        self.user_configs = ZooKeeperUserConfigs(self.store.client)
        self.broker_configs = ZooKeeperEntityConfigs(self.store.client, znodes.BROKERS)
        self.client_quota_configs = ZooKeeperClientQuotaConfigs(self.store.client)
        self.fetchers: ReplicaFetchers | None = None
        self._replicas: ReplicaManager | None = None
        self._to_controller: PeerConnection | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        #: the newest controller epoch seen in a controller request
        self.controller_epoch = 0
        self.broker_epoch = -1
        self._leader_addresses: dict[int, tuple[str, int]] = {}

    def start(self) -> None:
        """Connect to ZooKeeper (blocking, retried until `zookeeper.connection.timeout.ms`)."""
        self.store.start(self.config.zookeeper_connection_timeout_ms / 1000)
        self.user_configs.start()
        self.broker_configs.start()
        self.client_quota_configs.start()

    def register(self, listeners: list[Listener]) -> None:
        """Join the cluster: register this broker with the advertised address of each of its
        `listeners` (as bound), then take part in controller elections."""
        endpoints = tuple(
            BrokerEndpoint(listener.name, listener.security_protocol.value, *listener.advertised)
            for listener in listeners
        )
        plaintext = [e for e in endpoints if e.security_protocol == "PLAINTEXT"]
        main = (plaintext or list(endpoints))[0]
        registration = BrokerRegistration(
            node_id=self.config.node_id, host=main.host, port=main.port, rack=self.config.rack,
            endpoints=endpoints, pool=self.config.broker_pool,
        )  # fmt: skip
        self.broker_epoch = self.store.register(registration)
        self.store.add_session_listener(self._on_session)
        self.controller.start()

    def change_pool(self, pool: str | None) -> None:
        """`broker.pool` changed at run time: the registration says so from now on (placement
        and the controller read pools from registrations). Blocks on ZooKeeper."""
        registration = self.store.registration
        if registration is None or registration.pool == pool:
            return
        self.store.update_registration(replace(registration, pool=pool))
        log.info("broker.pool is now %r", pool or "")

    def attach(
        self,
        loop: asyncio.AbstractEventLoop,
        replicas: ReplicaManager,
        on_topic_changed: Callable[[str], None],
    ) -> None:
        """Start replicating for `replicas` (fetchers, ISR changes sent to the controller), and
        have `on_topic_changed(topic)` run on `loop` after a topic's config or assignment
        changed in ZooKeeper."""
        self._replicas = replicas
        self.fetchers = ReplicaFetchers(self.config.node_id, replicas, self.peer_security)
        replicas.on_isr_proposal = self._propose_isr
        replicas.followers = self

        def changed(name: str) -> None:
            loop.call_soon_threadsafe(on_topic_changed, name)

        self.store.add_topic_listener(changed)

    def _on_session(self, event: str) -> None:
        if event == "registered":
            registration = self.store.live_brokers().get(self.config.node_id)
            if registration is not None:
                self.broker_epoch = registration.epoch

    def close(self) -> None:
        self.controller.stop()
        self.store.close()

    async def stop_replicating(self) -> None:
        if self.fetchers is not None:
            await self.fetchers.close()
        for task in list(self._tasks):
            task.cancel()
        if self._to_controller is not None:
            self._to_controller.close()

    def follow(self, partition: Partition, leader: int, leader_epoch: int) -> bool:
        """Fetch `partition` from broker `leader`; False if its address is not known yet."""
        address = self.address_of(leader)
        if address is None or self.fetchers is None:
            return False
        self.fetchers.follow(partition, leader, address, leader_epoch)
        return True

    def stop_following(self, topic: str, index: int) -> None:
        if self.fetchers is not None:
            self.fetchers.stop_following((topic, index))

    def address_of(self, node_id: int) -> tuple[str, int] | None:
        broker = self.cache.brokers.get(node_id)
        if broker is not None:
            return broker.host, broker.port
        return self._leader_addresses.get(node_id)

    def note_leaders(self, leaders: dict[int, tuple[str, int]]) -> None:
        """Addresses of leaders named by a LeaderAndIsr request (it may come before any
        UpdateMetadata)."""
        self._leader_addresses.update(leaders)

    async def controlled_shutdown(self, attempts: int = 3, timeout_s: float = 10.0) -> None:
        """Ask the controller to move this broker's leaderships away before it stops (as
        `controlled.shutdown.enable` does in Kafka); gives up after `attempts`."""
        body = controlled_shutdown_request(self.config.node_id, self.broker_epoch)
        for attempt in range(1, attempts + 1):
            address = self.address_of(self.cache.controller_id)
            if address is not None:
                connection = PeerConnection(address, "weir-shutdown", security=self.peer_security)
                try:
                    async with asyncio.timeout(timeout_s):
                        response = await connection.request(
                            InterBrokerApiKey.CONTROLLED_SHUTDOWN,
                            CONTROLLED_SHUTDOWN_VERSION,
                            body,
                        )
                except (OSError, TimeoutError, asyncio.IncompleteReadError,
                        RemoteProtocolError) as exc:  # fmt: skip
                    log.warning("controlled shutdown, attempt %d: %s", attempt, exc)
                else:
                    if response.error_code == ErrorCode.none:
                        remaining = len(response.remaining_partitions)
                        log.info("controlled shutdown: leaderships moved; %d remain here "
                                 "(no other in-sync replica)", remaining)  # fmt: skip
                        return
                    log.warning("controlled shutdown, attempt %d: %s", attempt,
                                ErrorCode(response.error_code).name)  # fmt: skip
                finally:
                    connection.close()
            await asyncio.sleep(CONTROLLED_SHUTDOWN_BACKOFF_S)
        log.warning("controlled shutdown did not complete; stopping anyway")

    # ---- ISR changes ----------------------------------------------------------------------------

    def _propose_isr(self, partition: Partition, isr: frozenset[int]) -> None:
        task = asyncio.get_running_loop().create_task(self._send_isr(partition, isr))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send_isr(self, partition: Partition, isr: frozenset[int]) -> None:
        replicas = self._replicas
        state = partition.leader_state
        assert replicas is not None
        if state is None:
            return
        accepted: frozenset[int] | None = None
        epoch = state.partition_epoch
        try:
            address = self.address_of(self.cache.controller_id)
            topic_id = self.cache.topic_ids.get(partition.topic)
            if address is None or topic_id is None:
                return
            if self._to_controller is None or self._to_controller.address != address:
                if self._to_controller is not None:
                    self._to_controller.close()
                self._to_controller = PeerConnection(
                    address, "weir-isr", security=self.peer_security
                )
            body = alter_partition_request(
                self.config.node_id, self.broker_epoch, topic_id, partition.index,
                partition.leader_epoch, epoch, sorted(isr),
            )  # fmt: skip
            response = await self._to_controller.request(
                ApiKey.ALTER_PARTITION, ALTER_PARTITION_VERSION, body
            )
            if response.error_code:
                log.info("ISR change for %s-%d refused: %s", partition.topic, partition.index,
                         response.error_code)  # fmt: skip
                return
            for topic in response.topics:
                for answer in topic.partitions:
                    if answer.error_code:
                        log.info("ISR change for %s-%d refused: %s", partition.topic,
                                 partition.index, answer.error_code)  # fmt: skip
                        continue
                    accepted, epoch = frozenset(answer.isr), answer.partition_epoch
                    log.info("%s-%d: ISR %s (partition epoch %d)", partition.topic,
                             partition.index, sorted(accepted), epoch)  # fmt: skip
        except (OSError, asyncio.IncompleteReadError, RemoteProtocolError) as exc:
            log.info("ISR change for %s-%d not sent: %s", partition.topic, partition.index, exc)
        finally:
            replicas.isr_answered(partition, accepted, epoch)

    def check_controller(self, controller_epoch: int, broker_epoch: int) -> ErrorCode:
        """Whether a controller request may be applied; records its epoch if so."""
        if controller_epoch < self.controller_epoch:
            log.warning(
                "refusing a request of controller epoch %d: epoch %d has been seen",
                controller_epoch, self.controller_epoch,
            )  # fmt: skip
            return ErrorCode.stale_controller_epoch
        if broker_epoch not in (-1, self.broker_epoch) and broker_epoch < self.broker_epoch:
            return ErrorCode.stale_broker_epoch
        self.controller_epoch = controller_epoch
        return ErrorCode.none

    # ---- placement -------------------------------------------------------------------------------

    def leader_of(self, topic: str, index: int) -> tuple[int, tuple[str, int]] | None:
        """The leader of `topic-index` and its address as the controller last said, or None
        while it has none (or it is not known live); KeyError if the cluster lacks it."""
        partition = self.cache.topics[topic][index]
        broker = self.cache.brokers.get(partition.leader)
        if partition.leader < 0 or broker is None:
            return None
        return partition.leader, (broker.host, broker.port)

    def broker_pools(self) -> dict[int, str]:
        """Each live broker's `broker.pool` ("" for none), from its registration."""
        return {node_id: b.pool or "" for node_id, b in self.store.live_brokers().items()}

    def outside_pool(self, brokers: set[int], pool: str) -> list[int]:
        """Those of `brokers` not in `pool` (the live ones' pools are known; others count as
        in none)."""
        pools = self.broker_pools()
        return sorted(b for b in brokers if pools.get(b, "") != pool)

    def live_brokers(self) -> dict[int, LiveBroker]:
        if self.cache.brokers:
            return self.cache.brokers
        host, port = self.config.inter_broker_listener.advertised
        endpoints = {listener.name: listener.advertised for listener in self.config.endpoints}
        return {
            self.config.node_id: LiveBroker(
                self.config.node_id, host, port, self.config.rack, endpoints
            )
        }

    def place(
        self,
        topic: str,
        partitions: int,
        replication_factor: int,
        strategy: str,
        *,
        start_partition: int = 0,
        pool: str = "",
    ) -> list[list[int]]:
        """Replica lists for new partitions, on the live brokers of `pool` (empty: the brokers
        in no pool); PlacementError if they cannot be placed."""
        pools = self.broker_pools()
        brokers = [BrokerSpec(b.node_id, b.rack) for b in self.live_brokers().values()
                   if pools.get(b.node_id, "") == pool]  # fmt: skip
        if not brokers:
            raise PlacementError(no_broker_in_pool(pool))
        if any(b.rack for b in brokers) and not all(b.rack for b in brokers):
            brokers = [BrokerSpec(b.node_id, None) for b in brokers]  # as Kafka's "disabled"
        placed = assign(
            strategy, brokers, topic, partitions, replication_factor,
            start_partition=start_partition,
        )  # fmt: skip
        return [list(placed[start_partition + i]) for i in range(partitions)]
