"""KIP-890's defence on the partition leader: a transactional batch is appended only when its
partition is part of its producer's ongoing transaction, so that a stray or late batch cannot
open a transaction on a partition that no coordinator will ever end (a hanging transaction).

Only a producer's first transactional batch on a partition in a transaction is checked: once it
is appended, the partition's producer state holds the transaction open there until its COMMIT or
ABORT marker, and later batches of the same producer id and epoch pass. A transaction so costs
one check per partition, however many batches it writes. A check asks the coordinator of the
batch's transactional id: this broker's own directly, another broker's with AddPartitionsToTxn
v4 (`verify_only`). Requests to one coordinator are batched: while one is in flight, the checks
that arrive wait and go together in the next one.

A marker written while a check is in flight ends the transaction that the check may confirm, so
each check holds a guard on its (partition, producer); a marker ends the guards of its producer
on its partitions, and a batch whose guard ended is refused (Kafka's verification guard).

The coordinator's errors become those producers expect, as Kafka maps them: PRODUCER_FENCED is
INVALID_PRODUCER_EPOCH; a coordinator that cannot answer now (moved, loading, unreachable, busy
ending the transaction) is NOT_ENOUGH_REPLICAS, which producers retry.

`transaction.partition.verification.enable=false` turns the checks off. Thread-safety
(docs/threads.md): event-loop only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.add_partitions_to_txn.v4 import request as add_request
from kio.schema.errors import ErrorCode
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.static.primitive import i16, i32

from weir.broker.peer import PeerConnection
from weir.broker.replica_manager import ReplicaManager
from weir.broker.security.inter_broker import InterBrokerSecurity
from weir.broker.txn.coordinator import TransactionCoordinator
from weir.broker.txn.markers import LeaderLookup
from weir.broker.txn.store import TRANSACTION_STATE_TOPIC
from weir.protocol.errors import RemoteProtocolError
from weir.records import BatchHeader

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
#: transactional id -> (node id, address) of its coordinator, or None while it has none;
#: KeyError when the cluster has no `__transaction_state` yet
CoordinatorLookup = Callable[[str], tuple[int, tuple[str, int]] | None]

ADD_PARTITIONS_TO_TXN = 24
VERIFY_VERSION = 4
#: how long a leader waits for a coordinator's answer before the producer is told to retry
VERIFY_TIMEOUT_S = 10.0

#: coordinator answers that mean "not now": producers retry NOT_ENOUGH_REPLICAS
_RETRIABLE = frozenset({
    ErrorCode.network_exception, ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
    ErrorCode.concurrent_transactions,
})  # fmt: skip


def produce_error(error: ErrorCode) -> tuple[ErrorCode, str]:
    """The produce error (and its message) for a coordinator's answer to a check."""
    if error is ErrorCode.none:
        return error, ""
    if error is ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch, "the producer's epoch is fenced"
    if error in _RETRIABLE:
        return ErrorCode.not_enough_replicas, (
            f"cannot verify that the partition is in the transaction now ({error.name})"
        )
    if error is ErrorCode.invalid_txn_state:
        return error, "the partition was not added to the producer's ongoing transaction"
    return error, f"the transaction coordinator refused the batch ({error.name})"


@dataclass(slots=True)
class _Guard:
    holders: int = 0
    ended: bool = False


class VerificationGuards:
    """Guards of the checks in flight, by (topic, partition, producer id)."""

    def __init__(self) -> None:
        self._guards: dict[tuple[str, int, int], _Guard] = {}

    def hold(self, key: tuple[str, int, int]) -> _Guard:
        guard = self._guards.setdefault(key, _Guard())
        guard.holders += 1
        return guard

    def release(self, key: tuple[str, int, int], guard: _Guard) -> None:
        guard.holders -= 1
        if guard.holders <= 0 and self._guards.get(key) is guard:
            del self._guards[key]

    def marker_written(self, producer_id: int, partitions: Iterable[TopicPartition]) -> None:
        """A COMMIT or ABORT marker of `producer_id` went to `partitions`: checks in flight
        there no longer vouch for the transaction they were asked about."""
        for topic, index in partitions:
            guard = self._guards.pop((topic, index, producer_id), None)
            if guard is not None:
                guard.ended = True


@dataclass(frozen=True, slots=True)
class _Check:
    topic: str
    index: int
    producer_id: int
    producer_epoch: int

    @property
    def key(self) -> tuple[str, int, int]:
        return self.topic, self.index, self.producer_id


@dataclass(slots=True)
class _Pending:
    producer_id: int
    producer_epoch: int
    partitions: set[TopicPartition]
    future: asyncio.Future[dict[TopicPartition, ErrorCode]]


@dataclass(slots=True)
class _Channel:
    """Checks bound for one coordinator: one request in flight, the others gathered here."""

    peer: PeerConnection
    pending: dict[str, _Pending] = field(default_factory=dict)
    sender: asyncio.Task[None] | None = None


class TransactionVerifier:
    def __init__(
        self,
        coordinator: TransactionCoordinator | None,
        replicas: ReplicaManager,
        guards: VerificationGuards,
        *,
        enabled: bool = True,
        node_id: int = -1,
        coordinator_of: CoordinatorLookup | None = None,
        timeout_s: float = VERIFY_TIMEOUT_S,
        peer_security: InterBrokerSecurity | None = None,
    ) -> None:
        """`coordinator_of` (cluster mode) finds the coordinator of an id this broker does not
        coordinate; without it, only this broker's coordinator is asked. `peer_security`: how
        to reach other brokers (`inter.broker.listener.name`)."""
        self._coordinator = coordinator
        self._replicas = replicas
        self.guards = guards
        self.enabled = enabled
        self._node_id = node_id
        self._coordinator_of = coordinator_of
        self._timeout_s = timeout_s
        self._peer_security = peer_security
        self._channels: dict[int, _Channel] = {}
        #: coordinator round trips made (for tests and metrics)
        self.requests_sent = 0

    async def verify(
        self, transactional_id: str | None, batches: Sequence[tuple[str, int, bytes]]
    ) -> dict[TopicPartition, tuple[ErrorCode, str]]:
        """For the transactional batches of one produce request ((topic, partition, records)
        each), the errors of those that must be refused; the others may be appended."""
        if not batches:
            return {}
        if transactional_id is None:
            why = "a transactional batch without a transactional id"
            return {(t, i): (ErrorCode.invalid_txn_state, why) for t, i, _ in batches}
        if not self.enabled:
            return {}
        checks = [c for c in map(_check_of, batches) if self._needs_check(c)]
        if not checks:
            return {}
        held = [(c, self.guards.hold(c.key)) for c in checks]
        try:
            answers = await self._ask(transactional_id, checks)
        finally:
            for check, guard in held:
                self.guards.release(check.key, guard)
        refused: dict[TopicPartition, tuple[ErrorCode, str]] = {}
        for check, guard in held:
            error, message = produce_error(answers.get((check.topic, check.index),
                                                       ErrorCode.unknown_server_error))  # fmt: skip
            if error is ErrorCode.none and guard.ended:
                error, message = ErrorCode.invalid_txn_state, "the transaction ended meanwhile"
            if error is not ErrorCode.none:
                refused[(check.topic, check.index)] = (error, message)
        return refused

    def _needs_check(self, check: _Check) -> bool:
        """False when this producer's transaction is already open on the partition under the
        same epoch (its first batch was checked), or the partition is not led here."""
        partition = self._replicas.get(check.topic, check.index)
        if partition is None or not partition.serving:
            return False
        producers = partition.producers
        entry = producers.producers.get(check.producer_id)
        open_here = check.producer_id in producers.ongoing
        return not (open_here and entry is not None and entry.epoch == check.producer_epoch)

    async def _ask(
        self, transactional_id: str, checks: list[_Check]
    ) -> dict[TopicPartition, ErrorCode]:
        """The coordinator's answer for each checked partition."""
        producer_id, producer_epoch = checks[0].producer_id, checks[0].producer_epoch
        partitions = [(c.topic, c.index) for c in checks]
        if any((c.producer_id, c.producer_epoch) != (producer_id, producer_epoch) for c in checks):
            return dict.fromkeys(partitions, ErrorCode.invalid_producer_epoch)
        coordinator = self._coordinator
        if coordinator is not None and coordinator.store.is_coordinator(transactional_id):
            return coordinator.verify_partitions(
                transactional_id, producer_id, producer_epoch, partitions
            )
        where = self._remote(transactional_id)
        if isinstance(where, ErrorCode):
            return dict.fromkeys(partitions, where)
        node, address = where
        return await self._ask_remote(
            node, address, transactional_id, producer_id, producer_epoch, set(partitions)
        )

    def _remote(self, transactional_id: str) -> tuple[int, tuple[str, int]] | ErrorCode:
        """The coordinator on another broker, or why none can be asked now."""
        if self._coordinator_of is None:
            return ErrorCode.not_coordinator
        try:
            found = self._coordinator_of(transactional_id)
        except KeyError:
            return ErrorCode.coordinator_not_available
        if found is None:
            return ErrorCode.coordinator_not_available
        if found[0] == self._node_id:  # named here, not loaded yet
            return ErrorCode.not_coordinator
        return found

    # ---- AddPartitionsToTxn v4 to another broker ----------------------------------------------

    async def _ask_remote(
        self,
        node: int,
        address: tuple[str, int],
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: set[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        channel = self._channels.get(node)
        if channel is None or channel.peer.address != address:
            if channel is not None:
                channel.peer.close()
            peer = PeerConnection(address, "weir-txn-verify", timeout_s=self._timeout_s,
                                  security=self._peer_security)  # fmt: skip
            channel = self._channels[node] = _Channel(peer)
        waiting = channel.pending.get(transactional_id)
        if waiting is not None and (waiting.producer_id, waiting.producer_epoch) == (
            producer_id, producer_epoch
        ):  # fmt: skip
            waiting.partitions |= partitions
            future = waiting.future
        else:
            if waiting is not None:  # the older epoch of two is fenced, as Kafka does
                if producer_epoch < waiting.producer_epoch:
                    return dict.fromkeys(partitions, ErrorCode.invalid_producer_epoch)
                waiting.future.set_result(
                    dict.fromkeys(waiting.partitions, ErrorCode.invalid_producer_epoch)
                )
            future = asyncio.get_running_loop().create_future()
            channel.pending[transactional_id] = _Pending(
                producer_id, producer_epoch, set(partitions), future
            )
        if channel.sender is None:
            channel.sender = asyncio.get_running_loop().create_task(self._send_all(channel))
        return await asyncio.shield(future)

    async def _send_all(self, channel: _Channel) -> None:
        """Send what is pending, one request at a time, until nothing is."""
        batch: dict[str, _Pending] = {}
        try:
            while channel.pending:
                batch, channel.pending = channel.pending, {}
                answers = await self._send(channel.peer, batch)
                for transactional_id, pending in batch.items():
                    if not pending.future.done():
                        pending.future.set_result(answers[transactional_id])
        finally:
            channel.sender = None
            left, channel.pending = [*batch.values(), *channel.pending.values()], {}
            for pending in left:  # cancelled (closing) with checks still waiting
                if not pending.future.done():
                    pending.future.set_result(
                        dict.fromkeys(pending.partitions, ErrorCode.network_exception)
                    )

    async def _send(
        self, peer: PeerConnection, batch: dict[str, _Pending]
    ) -> dict[str, dict[TopicPartition, ErrorCode]]:
        self.requests_sent += 1
        body = add_request.AddPartitionsToTxnRequest(transactions=tuple(
            _transaction(transactional_id, pending) for transactional_id, pending in batch.items()
        ))  # fmt: skip
        try:
            response = await peer.request(ADD_PARTITIONS_TO_TXN, VERIFY_VERSION, body)
        except (OSError, asyncio.IncompleteReadError, RemoteProtocolError) as exc:
            log.info("verifying transactions with broker at %s failed: %r", peer.address, exc)
            return {t: dict.fromkeys(p.partitions, ErrorCode.network_exception)
                    for t, p in batch.items()}  # fmt: skip
        return _answers(response, batch)

    def close(self) -> None:
        for channel in self._channels.values():
            if channel.sender is not None:
                channel.sender.cancel()
            channel.peer.close()
        self._channels.clear()


def build_verifier(
    coordinator: TransactionCoordinator,
    replicas: ReplicaManager,
    guards: VerificationGuards,
    *,
    enabled: bool,
    node_id: int,
    leader_of: LeaderLookup | None,
    peer_security: InterBrokerSecurity | None = None,
) -> TransactionVerifier:
    """A broker's verifier; in a cluster (`leader_of` given) it finds a transactional id's
    coordinator as the leader of the id's `__transaction_state` partition."""
    lookup: CoordinatorLookup | None = None
    if leader_of is not None:
        find_leader, store = leader_of, coordinator.store

        def lookup(transactional_id: str) -> tuple[int, tuple[str, int]] | None:
            return find_leader(TRANSACTION_STATE_TOPIC, store.partition_for(transactional_id))

    return TransactionVerifier(coordinator, replicas, guards, enabled=enabled, node_id=node_id,
                               coordinator_of=lookup, peer_security=peer_security)  # fmt: skip


def _check_of(batch: tuple[str, int, bytes]) -> _Check:
    topic, index, records = batch
    fields = BatchHeader(records).fields()
    return _Check(topic, index, fields.producer_id, fields.producer_epoch)


def _transaction(transactional_id: str, pending: _Pending) -> Any:
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(pending.partitions):
        by_topic.setdefault(topic, []).append(index)
    return add_request.AddPartitionsToTxnTransaction(
        transactional_id=TransactionalId(transactional_id),
        producer_id=ProducerId(pending.producer_id),
        producer_epoch=i16(pending.producer_epoch),
        verify_only=True,
        topics=tuple(add_request.AddPartitionsToTxnTopic(
            name=TopicName(topic), partitions=tuple(i32(i) for i in indexes))
            for topic, indexes in by_topic.items()),
    )  # fmt: skip


def _answers(
    response: Any, batch: dict[str, _Pending]
) -> dict[str, dict[TopicPartition, ErrorCode]]:
    """Per transactional id, the answer for each partition asked about. A request-level
    error answers for all (CLUSTER_AUTHORIZATION_FAILED, which a producer should not see, as
    INVALID_TXN_STATE); a partition left unanswered counts as not verified."""
    top = response.error_code
    if top is not ErrorCode.none:
        if top is ErrorCode.cluster_authorization_failed:
            top = ErrorCode.invalid_txn_state
        return {t: dict.fromkeys(p.partitions, top) for t, p in batch.items()}
    answered: dict[str, dict[TopicPartition, ErrorCode]] = {}
    for result in response.results_by_transaction:
        answered[result.transactional_id] = {
            (topic.name, int(p.partition_index)): p.partition_error_code
            for topic in result.topic_results for p in topic.results_by_partition
        }  # fmt: skip
    return {
        t: {tp: answered.get(t, {}).get(tp, ErrorCode.invalid_txn_state) for tp in p.partitions}
        for t, p in batch.items()
    }
