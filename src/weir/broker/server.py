"""The broker process: one asyncio loop (uvloop), a listening socket per listener, one task per
connection. Its threads, what each owns and the only ways in: docs/threads.md.

A connection reads frames, answers each request in order (Kafka mutes a connection while it
handles a request, and so do we), and sends responses with `sendfile` for record bytes (through
TLS on SSL listeners, see `transport.py`). Any protocol violation closes that connection only
and is logged; other connections carry on.

On SSL and SASL listeners a connection must finish its TLS handshake and SASL authentication
within `connections.authentication.timeout.ms`; until it has authenticated it may send only
ApiVersions, SaslHandshake and SaslAuthenticate, in frames of at most
`sasl.server.max.receive.size` bytes (see `security/sasl.py`). Those frames take nothing from
the request budget authenticated clients wait on: their memory is what they have sent (a frame's
buffer grows as its bytes arrive), bounded by that size and the authentication timeout.

The accept loop survives running out of descriptors or memory (it logs, backs off and accepts
again once they free up); connections over `max.connections(.per.ip)` are closed at once, and
large requests wait for room under `queued.max.request.bytes` (see `connections.py`).
"""

from __future__ import annotations

import asyncio
import datetime
import errno
import logging
import resource
import signal
import socket
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from weir import diskio
from weir.broker import request_times
from weir.broker.audit import AuditLog
from weir.broker.audit_writer import AuditWriter
from weir.broker.authz.authorizer import from_config as authorizer_from_config
from weir.broker.authz.gate import refusal
from weir.broker.client_quotas import (
    BusyTime,
    ClientQuotas,
    ClientQuotaStore,
    busy_percentage,
    client_identity,
    throttle_connection,
)
from weir.broker.cluster_node import ClusterNode
from weir.broker.config import BrokerConfig
from weir.broker.connections import SMALL_FRAME_BYTES, ConnectionLimiter, RequestMemoryPool
from weir.broker.context import BrokerContext, ProducerIdAllocator
from weir.broker.disk_health import DiskHealth
from weir.broker.dynamic_config import BrokerConfigStore, DynamicBrokerConfig
from weir.broker.fetch_sessions import FetchSessionCache
from weir.broker.group.coordinator import GroupConfig, GroupCoordinator
from weir.broker.group.lag_monitor import ConsumerLagMonitor, sample_every
from weir.broker.group.store import OFFSETS_TOPIC, GroupStore
from weir.broker.handlers import HANDLERS, api_versions
from weir.broker.log_dir_mover import LogDirMovers
from weir.broker.meta_properties import check_and_write as check_meta_properties
from weir.broker.metrics.endpoint import MetricsEndpoint, serve_metrics
from weir.broker.metrics.snapshot import ControllerSample, Snapshot, Sources, take_snapshot
from weir.broker.metrics.stats import BrokerStats
from weir.broker.quota_rate import QuotaWindow
from weir.broker.replica_manager import ReplicaManager
from weir.broker.replication_quota import ReplicationQuotas
from weir.broker.request_log import RequestLog
from weir.broker.security.cluster_credentials import ZooKeeperCredentialStore
from weir.broker.security.credentials import CredentialStore, ScramCredentialStore
from weir.broker.security.errors import IllegalSaslStateError, SaslAuthenticationError
from weir.broker.security.listener_security import ListenerSecurity, listener_securities
from weir.broker.security.listeners import Listener
from weir.broker.security.scram import ScramCredential, ScramMechanism
from weir.broker.security.session import Session, bind
from weir.broker.shutdown import CONTROLLED_SHUTDOWN_BUDGET_S, ShutdownDeadline
from weir.broker.slow_lane import SlowLane
from weir.broker.topics import TopicManager
from weir.broker.transport import PlaintextTransport, TlsError, TlsTransport, Transport
from weir.broker.tuning import apply_allocator_settings, release_free_heap
from weir.broker.txn.coordinator import TransactionCoordinator, TxnConfig
from weir.broker.txn.markers import LocalMarkerWriter
from weir.broker.txn.store import TRANSACTION_STATE_TOPIC, TransactionStore
from weir.broker.txn.verification import VerificationGuards, build_verifier
from weir.broker.wire import ChunkedResponse
from weir.clock import Clock, SystemClock, ThreadScheduler
from weir.cluster.metadata import EmbeddedMetadataStore, MetadataStore
from weir.protocol import legacy_produce
from weir.protocol.apis import ApiKey, InterBrokerApiKey, cluster_advertised, decodable
from weir.protocol.codec import Request, decode_request, encode_response, peek_header
from weir.protocol.errors import FrameTooLargeError, RemoteProtocolError, UnsupportedVersionError
from weir.protocol.framing import NEED_DATA, Frame, FrameDecoder, NeedData, frame
from weir.storage import LogConfig, LogManager, LogManagerConfig

log = logging.getLogger(__name__)

RECV_BYTES = SMALL_FRAME_BYTES
GROUP_TICK_S = 0.1
TXN_TICK_S = 0.1
ISR_CHECK_INTERVAL_S = 1.0
ACCEPT_BACKOFF_S = (0.05, 1.0)  # first and longest wait after accept runs out of resources
ACCEPT_LOG_INTERVAL_MS = 10_000
#: free heap is handed back to the kernel once the request budget has drained after this many
#: bytes of large requests (glibc trims the top of its heap by itself below that), at most once
#: per TRIM_INTERVAL_MS
TRIM_AFTER_BYTES = 64 * 1024 * 1024
TRIM_INTERVAL_MS = 10_000
#: accept failures that mean "no descriptors or memory right now", not a broken listener
_ACCEPT_EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
#: accept failures that concern only the connection being accepted
_ACCEPT_PEER_GONE = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EPERM, errno.ECONNRESET})
#: requests the request quota does not count, as Kafka exempts them: other brokers' and
#: the authentication exchange
_REQUEST_QUOTA_EXEMPT = frozenset({
    *InterBrokerApiKey, ApiKey.ALTER_PARTITION, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE,
})  # fmt: skip


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A listener bound to its socket (its port is the real one), with its security."""

    listener: Listener
    sock: socket.socket
    security: ListenerSecurity


class Broker:
    def __init__(self, config: BrokerConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock: Clock = clock or SystemClock()
        self._security = listener_securities(config)  # before anything else: fail fast
        authorizer = authorizer_from_config(config)
        self.cluster = ClusterNode(config) if config.zookeeper else None
        if self.cluster is not None:
            self.cluster.start()
            check_meta_properties(
                config.all_log_dirs, config.node_id, self.cluster.store.cluster_id
            )
        table = cluster_advertised() if self.cluster else None
        self._decodable = {k: v for k, v in decodable(table).items() if k in HANDLERS}
        self._endpoints: list[Endpoint] = []
        self._connections: set[asyncio.Task[None]] = set()
        self._scheduler = ThreadScheduler(self.clock, name="weir-storage")
        self._request_log = RequestLog(self.clock)
        self._limiter = ConnectionLimiter(
            config.max_connections, config.max_connections_per_ip, self.clock
        )
        self._request_memory = RequestMemoryPool(config.queued_max_request_bytes)
        self._accept_failures = 0
        self._last_accept_log_ms: int | None = None
        self._last_trim_ms = -TRIM_INTERVAL_MS
        metadata: MetadataStore
        broker_configs: BrokerConfigStore
        quota_configs: ClientQuotaStore
        if self.cluster is not None:
            metadata, broker_configs = self.cluster.store, self.cluster.broker_configs
            quota_configs = self.cluster.client_quota_configs
        else:
            embedded = EmbeddedMetadataStore(config.all_log_dirs[0])
            metadata, broker_configs = embedded, embedded.broker_configs
            quota_configs = embedded.client_quota_configs
        self.dynamic_config = DynamicBrokerConfig(config, broker_configs)
        self.config = self.dynamic_config.current
        self._reconfigure_limits(self.config)
        self.context = self._open_storage(metadata)
        self.context.authorizer = authorizer
        self.context.dynamic_config = self.dynamic_config
        self.context.fetch_sessions = FetchSessionCache(
            config.max_incremental_fetch_session_cache_slots,
            config.min_incremental_fetch_session_eviction_ms,
        )
        self.dynamic_config.add_reconfigurable(self._reconfigure)
        window = QuotaWindow(
            max(1, config.quota_window_num), max(1, config.quota_window_size_seconds) * 1000
        )
        self.context.quotas = ClientQuotas(quota_configs, window, self.clock)
        replication_window = QuotaWindow(
            max(1, config.replication_quota_window_num),
            max(1, config.replication_quota_window_size_seconds) * 1000,
        )
        self.context.replicas.replication_quotas = ReplicationQuotas(
            config.node_id, replication_window
        )
        self._reconfigure_replication(self.config)
        self.context.log_dir_movers = LogDirMovers(
            self.context.replicas,
            self.clock,
            self.config.replica_alter_log_dirs_io_max_bytes_per_second,
        )
        self.dynamic_config.add_reconfigurable(self.context.log_dir_movers.reconfigure)
        #: what the metrics endpoint serves (`metrics.port`); None: nothing is counted
        self.stats = BrokerStats() if config.metrics_port else None
        self._request_log.stats = self.context.replicas.stats = self.stats
        self._metrics: MetricsEndpoint | None = None
        self.audit_writer = self._audit_writer() if config.audit_enable else None
        self._slow_lane = (
            SlowLane(config.num_slow_lane_threads, config.slow_lane_send_threshold_ms)
            if config.num_slow_lane_threads > 0 else None
        )  # fmt: skip

    def _audit_writer(self) -> AuditWriter:
        """Audit counts (`audit.enable`), and their writer to `__audit`."""
        config, context, cluster = self.config, self.context, self.cluster
        context.audit = AuditLog(config.node_id, self.clock)
        return AuditWriter(
            context.audit, context.replicas, context.topics, self.clock,
            partitions=config.audit_topic_num_partitions,
            replication=config.audit_topic_replication_factor if cluster is not None else 1,
            leader_of=cluster.leader_of if cluster is not None else None,
            peer_security=cluster.peer_security if cluster is not None else None,
        )  # fmt: skip

    async def flush_audit(self) -> None:
        """Write the audit counts left, at a clean shutdown (within a few seconds)."""
        if self.audit_writer is not None:
            await self.audit_writer.stop()

    def _reconfigure(self, config: BrokerConfig) -> None:
        """Take up a new effective config: the dynamic broker configs changed."""
        previous, self.config = self.config, config
        self.context.config = config
        self.context.topics.config = config
        self._reconfigure_limits(config)
        self._reconfigure_replication(config)
        if config.log_defaults != previous.log_defaults:
            self.context.replicas.log_manager.default_config = config.log_defaults
            for name in self.context.metadata.topics():
                self.context.topics.apply_stored_config(name)
        if config.broker_pool != previous.broker_pool and self.cluster is not None:
            changed = asyncio.get_running_loop().run_in_executor(
                None, self.cluster.change_pool, config.broker_pool)  # fmt: skip
            changed.add_done_callback(_pool_change_failed)

    def _reconfigure_limits(self, config: BrokerConfig) -> None:
        self._limiter.max_connections = config.max_connections
        self._limiter.max_per_ip = config.max_connections_per_ip

    def _reconfigure_replication(self, config: BrokerConfig) -> None:
        self.context.replicas.replication_quotas.set_bounds(
            config.leader_replication_throttled_rate, config.follower_replication_throttled_rate
        )

    def _open_storage(self, metadata: MetadataStore) -> BrokerContext:
        config = self.config
        defaults = config.log_defaults
        topic_configs = {
            name: LogConfig.from_properties(info.configs, defaults)
            for name, info in metadata.topics().items()
        }
        settings = LogManagerConfig(
            retention_check_interval_ms=config.log_retention_check_interval_ms,
            checkpoint_interval_ms=config.log_flush_offset_checkpoint_interval_ms,
            cleaner_backoff_ms=config.log_cleaner_backoff_ms,
        )
        logs = LogManager(
            config.all_log_dirs, defaults, self.clock, self._scheduler, settings, topic_configs
        )
        for (topic, index), _ in logs:
            info = metadata.topic(topic)
            if info is None or index >= info.partitions:
                log.warning("removing log %s-%d of a deleted topic", topic, index)
                logs.delete(topic, index)
            elif info.replicas and config.node_id not in info.replicas[index]:
                log.warning("removing log %s-%d: this broker is not one of its replicas %s "
                            "(moved away while it was down)", topic, index,
                            list(info.replicas[index]))  # fmt: skip
                logs.delete(topic, index)
        replicas = ReplicaManager(
            logs,
            self.clock,
            min_free_bytes=config.log_dir_min_free_bytes,
            node_id=config.node_id,
            replica_lag_time_max_ms=config.replica_lag_time_max_ms,
        )
        topics = TopicManager(config, metadata, replicas, cluster=self.cluster)
        groups = GroupCoordinator(
            GroupConfig(
                min_session_timeout_ms=config.group_min_session_timeout_ms,
                max_session_timeout_ms=config.group_max_session_timeout_ms,
                initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
                offsets_topic_partitions=config.offsets_topic_num_partitions,
                offset_metadata_max_bytes=config.offset_metadata_max_bytes,
                offsets_retention_ms=config.offsets_retention_minutes * 60_000,
                max_size=config.group_max_size,
            ),
            self.clock,
            GroupStore(
                replicas,
                topics,
                config.offsets_topic_num_partitions,
                self.clock,
                replication=config.offsets_topic_replication_factor if self.cluster else 1,
                cluster=self.cluster is not None,
            ),
        )
        producer_ids = ProducerIdAllocator(metadata)
        guards = VerificationGuards()
        transactions = self._transaction_coordinator(replicas, topics, producer_ids, groups, guards)
        if self.cluster is not None:  # on a single node they serve every partition from the start
            replicas.coordinators[OFFSETS_TOPIC] = groups
            replicas.coordinators[TRANSACTION_STATE_TOPIC] = transactions
        leader_of = self.cluster.leader_of if self.cluster is not None else None
        return BrokerContext(
            config,
            metadata,
            replicas,
            topics,
            producer_ids,
            groups,
            self.clock,
            self._request_log,
            self.cluster,
            transactions,
            self._credential_store(),
            build_verifier(
                transactions,
                replicas,
                guards,
                leader_of=leader_of,
                enabled=config.transaction_partition_verification_enable,
                node_id=config.node_id,
                peer_security=self.cluster.peer_security if self.cluster is not None else None,
            ),
        )

    def _credential_store(self) -> CredentialStore:
        """SCRAM credentials: in ZooKeeper in a cluster, in the data directory on one node."""
        if self.cluster is not None:
            return ZooKeeperCredentialStore(self.cluster.user_configs)
        return ScramCredentialStore(self.config.all_log_dirs[0])

    def _transaction_coordinator(
        self,
        replicas: ReplicaManager,
        topics: TopicManager,
        producer_ids: ProducerIdAllocator,
        groups: GroupCoordinator,
        guards: VerificationGuards,
    ) -> TransactionCoordinator:
        config = self.config
        store = TransactionStore(
            replicas,
            topics,
            config.transaction_state_log_num_partitions,
            self.clock,
            replication=config.transaction_state_log_replication_factor if self.cluster else 1,
            min_isr=config.transaction_state_log_min_isr if self.cluster else 1,
            segment_bytes=config.transaction_state_log_segment_bytes,
            cluster=self.cluster is not None,
        )
        return TransactionCoordinator(
            TxnConfig(
                max_timeout_ms=config.transaction_max_timeout_ms,
                transactional_id_expiration_ms=config.transactional_id_expiration_ms,
                abort_timed_out_interval_ms=(
                    config.transaction_abort_timed_out_transaction_cleanup_interval_ms
                ),
                remove_expired_interval_ms=(
                    config.transaction_remove_expired_transaction_cleanup_interval_ms
                ),
            ),
            self.clock,
            store,
            LocalMarkerWriter(
                replicas,
                self.clock,
                on_offsets_marker=groups.complete_transaction,
                node_id=config.node_id,
                leader_of=self.cluster.leader_of if self.cluster is not None else None,
                on_marker=guards.marker_written,
                peer_security=self.cluster.peer_security if self.cluster is not None else None,
            ),
            producer_ids.next_id,
        )

    # ---- lifecycle ----------------------------------------------------------------------------

    def listen(self) -> tuple[str, int]:
        """Bind every listener; the first one's address (as bound: a port 0 is resolved)."""
        for security in self._security:
            listener = security.listener
            family = socket.AF_INET6 if ":" in listener.host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((listener.host, listener.port))
            sock.listen(512)
            sock.setblocking(False)
            bound = replace(listener, port=sock.getsockname()[1])
            self._endpoints.append(Endpoint(bound, sock, replace(security, listener=bound)))
        first = self._endpoints[0].listener
        self.config = replace(self.config, listen_port=first.port)
        self.context.config = self.config
        dynamic = self.dynamic_config
        dynamic.static = replace(dynamic.static, listen_port=first.port)
        return first.host, first.port

    @property
    def endpoints(self) -> list[Listener]:
        """The bound listeners, in order."""
        return [endpoint.listener for endpoint in self._endpoints]

    async def serve(self) -> None:
        assert self._endpoints, "listen() first"
        loop = asyncio.get_running_loop()
        for tick in (self._tick_groups, self._tick_transactions):
            self._connections.add(loop.create_task(tick()))
        if self.audit_writer is not None:
            self.audit_writer.start(self.config.audit_flush_interval_ms)
        if self.context.log_dir_movers is not None:
            self.context.log_dir_movers.resume()
        await asyncio.gather(*(self._accept(endpoint) for endpoint in self._endpoints))

    async def _accept(self, endpoint: Endpoint) -> None:
        loop = asyncio.get_running_loop()
        backoff = ACCEPT_BACKOFF_S[0]
        while True:
            try:
                sock, peer = await loop.sock_accept(endpoint.sock)
            except OSError as exc:
                if exc.errno in _ACCEPT_PEER_GONE:
                    continue
                if exc.errno not in _ACCEPT_EXHAUSTED:
                    raise
                self._log_accept_failure(exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, ACCEPT_BACKOFF_S[1])
                continue
            backoff = ACCEPT_BACKOFF_S[0]
            self._start_connection(loop, sock, peer, endpoint)

    def _start_connection(
        self, loop: asyncio.AbstractEventLoop, sock: socket.socket, peer: Any, endpoint: Endpoint
    ) -> None:
        ip = _address(peer)
        if not self._limiter.admit(ip):
            sock.close()
            return
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            self._limiter.release(ip)
            sock.close()
            return
        task = loop.create_task(self._serve_connection(sock, peer, endpoint))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)
        task.add_done_callback(lambda _: self._limiter.release(ip))
        stats, listener = self.stats, endpoint.listener.name
        if stats is not None:
            stats.connection_opened(listener)
            task.add_done_callback(lambda _: stats.connection_closed(listener))

    def _log_accept_failure(self, exc: OSError, backoff: float) -> None:
        self._accept_failures += 1
        now = self.clock.monotonic_ms()
        if self._last_accept_log_ms is not None and (
            now - self._last_accept_log_ms < ACCEPT_LOG_INTERVAL_MS
        ):
            return
        what = (
            "out of memory"
            if exc.errno in (errno.ENOMEM, errno.ENOBUFS)
            else "out of file descriptors"
        )
        log.warning(
            "accept failed, %s (%s): retrying in %.2f s; %d failures so far, %d connections open",
            what, exc.strerror, backoff, self._accept_failures, self._limiter.open,
        )  # fmt: skip
        self._last_accept_log_ms = now

    async def _tick_groups(self) -> None:
        """Apply group deadlines (session and rebalance timeouts) a few times a second."""
        while True:
            await asyncio.sleep(GROUP_TICK_S)
            try:
                self.context.groups.tick()
            except Exception:
                log.exception("group coordinator tick failed")

    async def _tick_transactions(self) -> None:
        """Abort timed-out transactions and expire idle transactional ids (each at its own
        interval); finish transactions found prepared when the state was loaded."""
        transactions = self.context.transactions
        while transactions is not None:
            await asyncio.sleep(TXN_TICK_S)
            try:
                transactions.tick()
            except Exception:
                log.exception("transaction coordinator tick failed")

    def serve_metrics(self) -> int | None:
        """Serve `/metrics` on `metrics.host` (default: the first listener's host) and
        `metrics.port`, if set; the port as bound. On the event loop."""
        if self.stats is None:
            return None
        stats, replicas, cluster = self.stats, self.context.replicas, self.cluster

        def active_controller() -> bool:
            return cluster is None or cluster.controller.active

        lag = ConsumerLagMonitor(
            self.context.groups, replicas, self.clock, node_id=self.config.node_id,
            leader_of=cluster.leader_of if cluster is not None else None,
            peer_security=cluster.peer_security if cluster is not None else None,
        )  # fmt: skip

        def controller() -> ControllerSample | None:
            if cluster is None or not cluster.controller.active:
                return None
            counts = cluster.controller.stats
            return ControllerSample(
                counts.leader_elections, counts.unclean_leader_elections,
                counts.offline_partitions, counts.partitions, counts.events,
                counts.event_queue_ns, cluster.controller.event_queue_size,
            )  # fmt: skip

        sources = Sources(active_controller, controller, lambda: lag.latest, self.context.quotas,
                          lambda: self.context.disk_health, self._slow_lane)  # fmt: skip

        def take() -> Snapshot:
            return take_snapshot(stats, replicas, sources)

        host = self.config.metrics_host or self._endpoints[0].listener.host
        loop = asyncio.get_running_loop()
        interval_ms = self.config.consumer_lag_sample_interval_ms
        self._connections.add(loop.create_task(sample_every(lag, interval_ms)))
        self._connections.add(loop.create_task(stats.sample_loop_idle()))
        self._metrics = serve_metrics(loop, take, host, self.config.metrics_port)
        return self._metrics.port

    def watch_disks(self) -> None:
        """Sample the log directories' devices for throttling by disk health
        (`disk.throttle.enable`), on the event loop."""
        settings = self.config.disk_throttle
        if not settings.enabled:
            return
        logs = self.context.replicas.log_manager
        health = DiskHealth(settings, [d.path for d in logs.dirs],
                            now_ms=self.clock.monotonic_ms)  # fmt: skip
        self.context.disk_health = health

        async def sample() -> None:
            while True:
                health.sample((str(d.path), tp, partition_log.log_end_offset)
                              for d, held in logs.by_directory()
                              for tp, partition_log in held)  # fmt: skip
                await asyncio.sleep(settings.sample_interval_ms / 1000)

        self._connections.add(asyncio.get_running_loop().create_task(sample()))

    async def close(self) -> None:
        if self.audit_writer is not None:
            self.audit_writer.close()
        if self._metrics is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._metrics.close)
        for endpoint in self._endpoints:
            endpoint.sock.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._slow_lane is not None:
            self._slow_lane.close()
        if self.context.transactions is not None:
            await self.context.transactions.close()
        if self.context.verification is not None:
            self.context.verification.close()
        if self.cluster is not None:
            await self.cluster.stop_replicating()
            await asyncio.get_running_loop().run_in_executor(None, self.cluster.close)
        if self.context.authorizer is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.context.authorizer.close)
        if self.context.log_dir_movers is not None:
            await self.context.log_dir_movers.close()
        self.context.replicas.log_manager.close()
        self._scheduler.shutdown()

    async def _tick_replication(self) -> None:
        """Leaders look for followers that fell out of sync, once a second."""
        while True:
            await asyncio.sleep(ISR_CHECK_INTERVAL_S)
            try:
                self.context.replicas.check_isr()
            except Exception:
                log.exception("checking ISRs failed")

    def join_cluster(self) -> None:
        """In cluster mode, register in ZooKeeper with every listener's advertised address
        (blocking)."""
        if self.cluster is not None:
            loop = asyncio.get_running_loop()
            self.cluster.broker_configs.on_change(self.dynamic_config.follow(loop))
            self.dynamic_config.reload()  # what changed while this broker was starting
            quotas = self.context.quotas
            if quotas is not None:
                self.cluster.client_quota_configs.on_change(quotas.follow(loop))
                quotas.reload()
            self.cluster.register(self.endpoints)
            self.cluster.attach(
                asyncio.get_running_loop(),
                self.context.replicas,
                self.context.topics.apply_stored_config,
            )
            ticker = asyncio.get_running_loop().create_task(self._tick_replication())
            self._connections.add(ticker)

    # ---- connections --------------------------------------------------------------------------

    async def _serve_connection(self, sock: socket.socket, peer: Any, endpoint: Endpoint) -> None:
        session = endpoint.security.new_session(_address(peer), self._scram_credential)
        bind(session)
        transport: Transport = (
            TlsTransport(sock, endpoint.security.tls)
            if endpoint.security.tls is not None
            else PlaintextTransport(sock, self._slow_lane, _address(peer))
        )
        decoder = FrameDecoder(self.config.socket_request_max_bytes)
        held = 0  # bytes of the request budget this connection holds
        stats = self.stats
        received_ns = 0  # when the last bytes were read (the frames they completed were read)
        try:
            await self._authenticate_transport(transport, session)
            while True:
                if not session.authenticated:
                    decoder.max_frame_bytes = self.config.sasl_server_max_receive_size
                    decoder.limit_name = "sasl.server.max.receive.size"
                else:
                    decoder.max_frame_bytes = self.config.socket_request_max_bytes
                    decoder.limit_name = "socket.request.max.bytes"
                payload = decoder.next_frame()
                if payload is NEED_DATA:
                    if not held and session.authenticated:
                        held = await self._reserve(decoder)
                    if not await self._receive(transport, decoder, session):
                        return
                    if stats is not None:
                        received_ns = time.perf_counter_ns()
                    continue
                assert not isinstance(payload, NeedData)
                times = request_times.begin(received_ns) if stats is not None else None
                try:
                    response = await self._answer(session, payload)
                finally:
                    del payload
                    self._request_memory.release(held)
                    held = 0
                throttle_s, session.throttle_ms = session.throttle_ms / 1000, 0
                if response is not None:
                    try:
                        if throttle_s and session.throttle_before_response:
                            await asyncio.sleep(throttle_s)
                            throttle_s = 0
                        await self._send(transport, response)
                    finally:
                        if isinstance(response, ChunkedResponse):
                            response.close()
                if times is not None and stats is not None and times.api_key >= 0:
                    stats.timed(times.api_key, times.phases(time.perf_counter_ns()))
                    request_times.end()
                if throttle_s:  # KIP-219: the client is over its quota; nothing is read
                    await asyncio.sleep(throttle_s)
                if session.close_after_response:
                    # as Kafka does: a client that reads the refusal before the close can
                    # report it, rather than a lost connection
                    delay_ms = self.config.connection_failed_authentication_delay_ms
                    await asyncio.sleep(delay_ms / 1000)
                    return
        except RemoteProtocolError as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except TlsError as exc:
            log.info("closing connection from %s on %s: %s", peer, endpoint.listener.name, exc)
        except (ConnectionError, TimeoutError):
            pass
        except OSError as exc:
            log.info("connection from %s failed: %s", peer, exc)
        except Exception:
            log.exception("closing connection from %s after an internal error", peer)
        finally:
            self._request_memory.release(held)
            transport.close()
            self._release_free_heap()

    def _release_free_heap(self) -> None:
        """Hand free heap back to the kernel once the request budget has drained after large
        requests (rarely: see TRIM_AFTER_BYTES)."""
        pool = self._request_memory
        now = self.clock.monotonic_ms()
        if pool.used or pool.released_since_trim < TRIM_AFTER_BYTES:
            return
        if now - self._last_trim_ms < TRIM_INTERVAL_MS:
            return
        pool.released_since_trim = 0
        self._last_trim_ms = now
        release_free_heap()

    def _authentication_deadline(self) -> float:
        timeout_s = self.config.connections_authentication_timeout_ms / 1000
        return asyncio.get_running_loop().time() + timeout_s

    async def _authenticate_transport(self, transport: Transport, session: Session) -> None:
        """The TLS handshake (on TLS listeners), within the authentication timeout; the
        principal of a verified client certificate on an SSL listener."""
        if not session.listener.security_protocol.uses_tls:
            return
        session.deadline = self._authentication_deadline()
        async with asyncio.timeout_at(session.deadline):
            await transport.handshake()
        if session.sasl is None:
            principal = ListenerSecurity.certificate_principal(transport.peer_certificate())
            if principal is not None:
                session.principal = principal

    def _scram_credential(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        store = self.context.scram_credentials
        return store.lookup(user, mechanism) if store is not None else None

    async def _answer(self, session: Session, payload: Frame) -> bytes | ChunkedResponse | None:
        """The response to one frame: a request, or a bare SASL token after SaslHandshake v0."""
        if session.raw_sasl_tokens:
            return self._raw_sasl_token(session, bytes(payload))
        api_key = peek_header(payload)[0]
        if not session.allows(api_key):
            raise IllegalSaslStateError(
                f"request of API {_api_name(api_key)} before SASL authentication on listener "
                f"{session.listener.name}"
            )
        return await self._dispatch(payload)

    @staticmethod
    def _raw_sasl_token(session: Session, token: bytes) -> bytes:
        """A SASL token sent without a Kafka header (SaslHandshake v0): the answer is the
        server's token, size-prefixed; a failure closes the connection."""
        try:
            answer = session.authenticate(token)
        except SaslAuthenticationError as exc:
            raise IllegalSaslStateError(f"SASL authentication failed: {exc}") from None
        return frame(answer)

    async def _reserve(self, decoder: FrameDecoder) -> int:
        """Wait for budget for the frame being received, if it is a large one; bytes held."""
        size = decoder.next_frame_size
        if size is None or size <= SMALL_FRAME_BYTES or size > decoder.max_frame_bytes:
            return 0  # oversized frames are refused by the decoder itself
        if size > self._request_memory.capacity:
            raise FrameTooLargeError(
                f"frame of {size} bytes exceeds "
                f"queued.max.request.bytes={self._request_memory.capacity}"
            )
        await self._request_memory.acquire(size)
        return size

    async def _receive(
        self, transport: Transport, decoder: FrameDecoder, session: Session
    ) -> bool:
        """Read what the transport has: into a large frame in place, or into the decoder's
        buffer. False once the peer has closed. Before authentication, within its deadline."""
        if session.authenticated:
            return await _receive(transport, decoder)
        if session.deadline is None:
            session.deadline = self._authentication_deadline()
        try:
            async with asyncio.timeout_at(session.deadline):
                return await _receive(transport, decoder)
        except TimeoutError:
            log.info(
                "closing connection from %s on %s: not authenticated within "
                "connections.authentication.timeout.ms=%d",
                session.client_address, session.listener.name,
                self.config.connections_authentication_timeout_ms,
            )  # fmt: skip
            return False

    async def _dispatch(self, payload: Frame) -> bytes | ChunkedResponse | None:
        try:
            request = decode_request(payload, self._decodable)
        except UnsupportedVersionError as exc:
            if exc.api_key == ApiKey.PRODUCE and 0 <= exc.api_version < 3:
                return legacy_produce.refuse(payload)
            if exc.api_key != ApiKey.API_VERSIONS:
                raise
            response = api_versions.build(0, ErrorCode.unsupported_version)
            return encode_response(ApiKey.API_VERSIONS, 0, exc.correlation_id, response)
        started = self.clock.monotonic_ms()
        authorizer = self.context.authorizer
        result = refusal(authorizer, request) if authorizer is not None else None
        if result is None:
            quotas = self.context.quotas
            if quotas is not None and quotas.request.enabled and not _quota_exempt(request):
                result = await self._handle_in_request_quota(request, quotas)
            else:
                result = await HANDLERS[request.api_key](self.context, request)
        times = request_times.current()
        if times is not None:
            times.api_key, times.handled_ns = request.api_key, time.perf_counter_ns()
        self._request_log.record(request, result, started)
        if result is None or isinstance(result, ChunkedResponse):
            return result
        return encode_response(request.api_key, request.api_version, request.correlation_id, result)

    async def _handle_in_request_quota(self, request: Request, quotas: ClientQuotas) -> Any:
        """The handler's response, the time the loop spent on it recorded against the client's
        request quota; a client over it is throttled."""
        timed: BusyTime[Any] = BusyTime(HANDLERS[request.api_key](self.context, request))
        result = await timed
        user, client_id = client_identity(request.client_id)
        throttle_ms = quotas.request.record(user, client_id, busy_percentage(timed.busy_ns))
        if not throttle_ms:
            return result
        throttle_connection(throttle_ms)
        current = getattr(result, "throttle_time", None)
        if isinstance(current, datetime.timedelta) and current < timedelta_ms(throttle_ms):
            result = replace(result, throttle_time=timedelta_ms(throttle_ms))
        return result

    @staticmethod
    async def _send(transport: Transport, response: bytes | ChunkedResponse) -> None:
        if isinstance(response, bytes):
            await transport.send(response)
            return
        pending = bytearray()
        for chunk in response.chunks:
            if isinstance(chunk, bytes):
                pending += chunk
                continue
            if pending:
                await transport.send(pending)
                pending = bytearray()
            await transport.send_file(chunk)
        if pending:
            await transport.send(pending)


async def _receive(transport: Transport, decoder: FrameDecoder) -> bool:
    target = decoder.receive_buffer()
    if target is not None:
        with target:
            count = await transport.recv_into(target)
        decoder.received(count)
        return count > 0
    data = await transport.recv(RECV_BYTES)
    decoder.receive_data(data)
    return bool(data)


def _quota_exempt(request: Request) -> bool:
    """Whether the request quota leaves this request alone: another broker's (a follower's
    fetch among them) or the authentication exchange."""
    replica_id = getattr(request.body, "replica_id", -1)
    return request.api_key in _REQUEST_QUOTA_EXEMPT or replica_id >= 0


def timedelta_ms(milliseconds: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=milliseconds)


def _address(peer: Any) -> str:
    return str(peer[0]) if isinstance(peer, tuple) else str(peer)


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)


def run(config: BrokerConfig, *, ready_file: Path | None = None) -> int:
    """Run a broker until SIGTERM or SIGINT; print the ready line once it accepts connections."""
    import uvloop

    diskio.install_faults_from_environment()
    raise_descriptor_limit()
    apply_allocator_settings()

    async def main() -> None:
        broker = Broker(config)
        host, port = broker.listen()
        broker.serve_metrics()
        broker.watch_disks()
        broker.join_cluster()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        server = loop.create_task(broker.serve())
        advertised_host, advertised_port = broker.config.advertised
        print(f"weir broker ready on {advertised_host}:{advertised_port}", flush=True)
        if ready_file is not None:
            ready_file.write_text(_ready_text(host, port, broker.endpoints))
        await stop.wait()
        deadline = ShutdownDeadline(loop)
        deadline.start()
        await broker.flush_audit()  # while this broker still serves and leads
        if broker.cluster is not None:
            try:
                async with asyncio.timeout(CONTROLLED_SHUTDOWN_BUDGET_S):
                    await broker.cluster.controlled_shutdown()
            except TimeoutError:
                log.warning("controlled shutdown did not complete within %gs; stopping anyway",
                            CONTROLLED_SHUTDOWN_BUDGET_S)  # fmt: skip
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)
        await broker.close()
        deadline.finish()

    uvloop.run(main())
    return 0


def _ready_text(host: str, port: int, listeners: list[Listener]) -> str:
    """The ready file: `HOST:PORT` of the first listener, then, when there are several, a line
    `NAME://HOST:PORT` for each (ports as bound)."""
    lines = [f"{host}:{port}"]
    if len(listeners) > 1:
        lines += [str(listener) for listener in listeners]
    return "".join(line + "\n" for line in lines)


def raise_descriptor_limit() -> None:
    """Raise the soft limit on open descriptors to the hard one, as Kafka's packaging does:
    every connection and every segment file needs one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:
            log.warning("open descriptor limit stays at %d: %s", soft, exc)
            return
    log.info("open descriptor limit: %d", hard)


def _pool_change_failed(done: asyncio.Future[None]) -> None:
    if not done.cancelled() and done.exception() is not None:
        log.error("broker.pool changed, but the registration was not: %s", done.exception())
