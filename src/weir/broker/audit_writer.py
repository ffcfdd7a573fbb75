"""Writing the audit counts (`audit.py`) to the compacted internal topic `__audit`.

Every `audit.flush.interval.ms`, and once more at a clean shutdown, the counts that changed
since they were last written go to `__audit` as record batches (`weir.protocol.audit_records`
gives their keys and values). A broker writes to partition `node id % partitions`, so a key's
later counts always follow its earlier ones in one partition's order.

In a cluster this broker may not lead that partition. The writer does what the transaction
markers do (`txn/markers.py`): when it leads the partition it appends through the replica
manager and waits, as acks=all, for the in-sync replicas; otherwise it sends the batch to the
leader as a Produce request with acks=all over an inter-broker connection (`peer.py`, with the
inter-broker listener's security). The leader takes writes to `__audit` from brokers only: this
writer's client id and ClusterAction on the cluster (`weir.broker.authz.checks.produce_error`).
An in-process Kafka client would need credentials and librdkafka's threads of its own in the
broker; appending only to partitions led here would leave a broker that leads none unable to
write.

Audit never stands in a client's way: the writer is a task of its own, and its appends are
small produce requests. When `__audit` cannot be written (no leader yet, the leader unreachable,
too few in-sync replicas, a full disk) the failure is logged once and the counts wait for the
next flush, within `AuditLog.max_counts`.

The topic is created on the first flush with something to write, as the group coordinator
creates `__consumer_offsets`: `audit.topic.num.partitions` partitions, replication factor
`audit.topic.replication.factor` in a cluster (1 on a single node), cleanup.policy=compact; in a
cluster its ZooKeeper write runs off the event loop. A topic that exists is used with its own
partition count.

Thread-safety (docs/threads.md): event-loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Iterator, Sequence

from kio.schema.errors import ErrorCode
from kio.schema.produce.v9 import request as produce_request
from kio.schema.types import TopicName
from kio.static.primitive import Records, i16, i32, i32Timedelta

from weir.broker.audit import AUDIT_WRITER_CLIENT_ID, AuditLog
from weir.broker.peer import PeerConnection
from weir.broker.replica_manager import ReplicaManager
from weir.broker.security.inter_broker import InterBrokerSecurity
from weir.broker.topics import TopicError, TopicManager
from weir.broker.txn.markers import LeaderLookup
from weir.clock import Clock
from weir.protocol.apis import ApiKey
from weir.protocol.audit_records import AUDIT_TOPIC, AuditEntry, encode_key, encode_value
from weir.protocol.errors import RemoteProtocolError
from weir.records import Record, build_batch

log = logging.getLogger(__name__)

AUDIT_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": str(100 * 1024 * 1024),
    "max.message.bytes": str(1024 * 1024),
}
#: the most bytes of keys and values in one batch (the topic takes batches up to 1 MiB)
BATCH_BYTES = 512 * 1024
ACKS_ALL = -1
#: how long a write waits for the in-sync replicas (Kafka's request.timeout.ms)
REPLICATION_TIMEOUT_MS = 30_000
PRODUCE_VERSION = 9
#: how long the last flush at shutdown may take
SHUTDOWN_FLUSH_S = 3.0

#: an entry with its key and value
Encoded = tuple[AuditEntry, bytes, bytes]


class AuditWriter:
    """Writes an `AuditLog`'s changed counts to `__audit`. Event-loop only."""

    def __init__(
        self,
        audit: AuditLog,
        replicas: ReplicaManager,
        topics: TopicManager,
        clock: Clock,
        *,
        partitions: int,
        replication: int = 1,
        leader_of: LeaderLookup | None = None,
        peer_security: InterBrokerSecurity | None = None,
    ) -> None:
        """`leader_of`: a cluster's leader lookup (None on a single node, which leads every
        partition)."""
        self.audit = audit
        self._replicas = replicas
        self._topics = topics
        self._clock = clock
        self._partitions = partitions
        self._replication = replication
        self._leader_of = leader_of
        self._peer_security = peer_security
        self._peers: dict[int, PeerConnection] = {}
        self._failing: str | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self, interval_ms: int) -> None:
        """Flush every `interval_ms` from now on, in a task of its own."""
        self._task = asyncio.get_running_loop().create_task(self._run(interval_ms))

    async def _run(self, interval_ms: int) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await self.flush()
            except Exception:
                log.exception("audit: flushing to %s failed", AUDIT_TOPIC)

    async def stop(self, budget_s: float = SHUTDOWN_FLUSH_S) -> None:
        """Stop flushing every interval; write what is left, within `budget_s`."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        try:
            async with asyncio.timeout(budget_s):
                await self.flush()
        except TimeoutError:
            log.warning("audit: the last counts were not written to %s within %gs",
                        AUDIT_TOPIC, budget_s)  # fmt: skip
        self.close()

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for peer in self._peers.values():
            peer.close()
        self._peers.clear()

    async def flush(self) -> bool:
        """Write the counts that changed; whether all of them are written."""
        entries = self.audit.changed()
        if not entries:
            return True
        partition = await self._partition()
        if partition is None:
            return False
        for chunk in _chunks([(e, encode_key(e), encode_value(e)) for e in entries]):
            error, message = await self._append(partition, self._batch(chunk))
            if error is not ErrorCode.none:
                self._failed(f"{error.name.upper()}{': ' + message if message else ''}")
                return False
            self.audit.written([entry for entry, _, _ in chunk])
        if self._failing is not None:
            log.info("audit: %s is written again", AUDIT_TOPIC)
            self._failing = None
        return True

    def _failed(self, why: str) -> None:
        """Log a failure to write, once until it changes or the writes succeed again."""
        if why != self._failing:
            log.warning("audit: cannot write to %s (%s); the counts are kept and written "
                        "again at the next flush", AUDIT_TOPIC, why)  # fmt: skip
        self._failing = why

    async def _partition(self) -> int | None:
        """This broker's partition of `__audit`, the topic created if it is not there."""
        info = self._topics.metadata.topic(AUDIT_TOPIC)
        if info is None:
            try:
                info = await self._topics.create_internal(
                    AUDIT_TOPIC, self._partitions, dict(AUDIT_TOPIC_CONFIG),
                    replication=self._replication,
                )  # fmt: skip
            except TopicError as exc:
                if exc.error is not ErrorCode.topic_already_exists:  # else: known here soon
                    self._failed(f"it cannot be created: {exc}")
                return None
            log.info("audit: created %s with %d partitions", AUDIT_TOPIC, info.partitions)
        return self.audit.node_id % info.partitions

    def _batch(self, encoded: Sequence[Encoded]) -> bytes:
        now = self._clock.milliseconds()
        records = [Record(offset=i, timestamp=now, key=key, value=value)
                   for i, (_, key, value) in enumerate(encoded)]  # fmt: skip
        return build_batch(records)

    async def _append(self, partition: int, batch: bytes) -> tuple[ErrorCode, str | None]:
        """Append `batch` to the partition here or at its leader, acks=all."""
        if self._leader_of is not None:
            try:
                leader = self._leader_of(AUDIT_TOPIC, partition)
            except KeyError:
                return ErrorCode.unknown_topic_or_partition, "not in this broker's metadata yet"
            if leader is None:
                return ErrorCode.leader_not_available, None
            if leader[0] != self.audit.node_id:
                return await self._send(leader[0], leader[1], partition, batch)
        return await self._append_here(partition, batch)

    async def _append_here(self, partition: int, batch: bytes) -> tuple[ErrorCode, str | None]:
        result = self._replicas.append(AUDIT_TOPIC, partition, batch, acks=ACKS_ALL)
        if result.error is not ErrorCode.none:
            return result.error, result.message
        if not self._replicas.replicating(AUDIT_TOPIC, partition, result.end_offset):
            return ErrorCode.none, None
        error = await self._replicas.wait_replicated(
            AUDIT_TOPIC, partition, result.end_offset, REPLICATION_TIMEOUT_MS
        )
        return error, None

    async def _send(
        self, node_id: int, address: tuple[str, int], partition: int, batch: bytes
    ) -> tuple[ErrorCode, str | None]:
        """A Produce request with acks=all to the partition's leader `node_id`."""
        peer = self._peers.get(node_id)
        if peer is None or peer.address != address:
            if peer is not None:
                peer.close()
            peer = self._peers[node_id] = PeerConnection(
                address, AUDIT_WRITER_CLIENT_ID, security=self._peer_security,
                timeout_s=REPLICATION_TIMEOUT_MS / 1000 + 5,
            )  # fmt: skip
        body = produce_request.ProduceRequest(
            transactional_id=None, acks=i16(ACKS_ALL),
            timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=REPLICATION_TIMEOUT_MS)),
            topic_data=(produce_request.TopicProduceData(
                name=TopicName(AUDIT_TOPIC),
                partition_data=(produce_request.PartitionProduceData(
                    index=i32(partition), records=Records(batch)),),
            ),),
        )  # fmt: skip
        try:
            response = await peer.request(ApiKey.PRODUCE, PRODUCE_VERSION, body)
        except (OSError, asyncio.IncompleteReadError, RemoteProtocolError) as exc:
            return ErrorCode.network_exception, f"broker {node_id}: {exc!r}"
        for topic in response.responses:
            for answer in topic.partition_responses:
                return answer.error_code, answer.error_message
        return ErrorCode.unknown_server_error, f"broker {node_id} answered for no partition"


def _chunks(encoded: Sequence[Encoded]) -> Iterator[Sequence[Encoded]]:
    """`encoded` in runs whose keys and values take at most BATCH_BYTES (a longer entry alone)."""
    start, size = 0, 0
    for end, (_, key, value) in enumerate(encoded):
        entry_size = len(key) + len(value)
        if end > start and size + entry_size > BATCH_BYTES:
            yield encoded[start:end]
            start, size = end, 0
        size += entry_size
    if start < len(encoded):
        yield encoded[start:]
