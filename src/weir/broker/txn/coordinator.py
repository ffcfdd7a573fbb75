"""The transaction coordinator: Kafka's transactional producers (KIP-98), one transactional id
at a time.

InitProducerId gives a transactional id its producer id and a new epoch, fencing every older
producer of that id (an open transaction of the old producer is aborted first). The producer
registers partitions (AddPartitionsToTxn) and consumer groups (AddOffsetsToTxn, which adds the
group's `__consumer_offsets` partition) before writing to them; EndTxn moves the transaction to
PrepareCommit or PrepareAbort, persisted before the producer hears back, then markers are
written to every partition and the transaction is CompleteCommit or CompleteAbort. A
transaction open longer than its timeout is aborted by the coordinator with a bumped epoch, so
its producer is fenced. Every state change is written to `__transaction_state` first; a broker
that (re)loads a partition of it finishes the transactions it finds prepared.

Time comes from the injected clock; `tick()` applies timeouts and expirations (the broker calls
it periodically, tests after moving a fake clock). Thread-safety (docs/threads.md): event-loop only.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Collection, Coroutine, Iterable
from dataclasses import dataclass, replace
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.txn.markers import MarkerWriter
from weir.broker.txn.metadata import (
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    TransactionMetadata,
    epoch_exhausted,
)
from weir.broker.txn.records import TxnLogValue
from weir.broker.txn.state import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    DEAD,
    EMPTY,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    PREPARE_EPOCH_FENCE,
    TxnState,
    check_transition,
)
from weir.broker.txn.store import TransactionStore
from weir.clock import Clock

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnConfig:
    max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    abort_timed_out_interval_ms: int = 10_000
    remove_expired_interval_ms: int = 3_600_000
    #: the first wait before writing markers again after a retriable error; doubles up to 1 s
    marker_retry_backoff_ms: int = 100


@dataclass(frozen=True, slots=True)
class InitResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: TxnState


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    error: ErrorCode
    transactional_id: str
    state: TxnState | None = None
    timeout_ms: int = 0
    start_ms: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    partitions: tuple[TopicPartition, ...] = ()


Sleep = Callable[[float], Awaitable[None]]
MAX_MARKER_BACKOFF_MS = 1_000


class TransactionCoordinator:
    def __init__(
        self,
        config: TxnConfig,
        clock: Clock,
        store: TransactionStore,
        markers: MarkerWriter,
        next_producer_id: Callable[[], int],
        *,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        """`next_producer_id` hands out a fresh producer id (it may raise OSError when a new
        block of ids cannot be recorded)."""
        self.config = config
        self._clock = clock
        self.store = store
        self.markers = markers
        self._next_producer_id = next_producer_id
        self._sleep = sleep
        self.transactions: dict[str, TransactionMetadata] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._unstarted: list[TransactionMetadata] = []
        self._last_abort_check = self._last_expiry_check = clock.monotonic_ms()
        self._load()

    # ---- loading ------------------------------------------------------------------------------

    def _load(self, indexes: list[int] | None = None) -> None:
        for transactional_id, value in self.store.load(indexes).items():
            txn = TransactionMetadata.from_stored(transactional_id, value)
            self.transactions[transactional_id] = txn
            if txn.state.is_prepared:
                self._unstarted.append(txn)
        self._start_pending_completions()

    def load_partition(self, index: int) -> None:
        """This broker became the coordinator of the ids in `__transaction_state` partition
        `index` (it leads it now): read their state and finish their prepared transactions."""
        self.unload_partition(index)
        self._load([index])

    def unload_partition(self, index: int) -> None:
        """Another broker coordinates the ids of partition `index` now: forget them here (their
        marker writing stops; the new coordinator finishes it)."""
        for transactional_id in [t for t in self.transactions
                                 if self.store.partition_for(t) == index]:  # fmt: skip
            del self.transactions[transactional_id]

    def _start_pending_completions(self) -> None:
        """Finish transactions loaded in a prepared state, once an event loop runs."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        unstarted, self._unstarted = self._unstarted, []
        for txn in unstarted:
            if self.transactions.get(txn.transactional_id) is txn and txn.state.is_prepared:
                log.info("completing transaction of %r found in %s",
                         txn.transactional_id, txn.state.value)  # fmt: skip
                self._spawn(self._complete(txn, txn.state is PREPARE_COMMIT))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def settle(self) -> None:
        """Wait until no marker writing or completion is in progress (for tests and shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        close_markers = getattr(self.markers, "close", None)
        if close_markers is not None:
            close_markers()

    # ---- InitProducerId -----------------------------------------------------------------------

    async def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        producer_id: int = -1,
        producer_epoch: int = NO_PRODUCER_EPOCH,
    ) -> InitResult:
        """A producer id and a new epoch for `transactional_id`; `producer_id`/`producer_epoch`
        are the ones the producer had (KIP-360), or -1."""
        if not transactional_id:
            return InitResult(ErrorCode.invalid_request)
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return InitResult(ErrorCode.invalid_transaction_timeout)
        error = self._coordinator_error(transactional_id)
        if error is not ErrorCode.none:
            return InitResult(error)
        txn = self.transactions.get(transactional_id)
        if txn is None:
            try:
                new_id = self._next_producer_id()
            except OSError as exc:
                log.warning("no producer id for %r: %s", transactional_id, exc)
                return InitResult(ErrorCode.coordinator_not_available)
            txn = TransactionMetadata(transactional_id, new_id, NO_PRODUCER_EPOCH, timeout_ms,
                                      EMPTY, self._clock.milliseconds())  # fmt: skip
            self.transactions[transactional_id] = txn
        if txn.pending is not None or txn.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return InitResult(ErrorCode.concurrent_transactions)
        if not _valid_producer(txn, producer_id, producer_epoch):
            return InitResult(ErrorCode.producer_fenced)
        if txn.state is ONGOING:
            # The old producer's transaction is aborted under a bumped epoch; the new producer
            # retries and then gets an epoch of its own.
            await self._fence_and_abort(txn)
            return InitResult(ErrorCode.concurrent_transactions)
        if txn.state is DEAD or txn.state is PREPARE_EPOCH_FENCE:
            return InitResult(ErrorCode.concurrent_transactions)
        return await self._bump_epoch(txn, timeout_ms, producer_id, producer_epoch)

    async def _bump_epoch(
        self, txn: TransactionMetadata, timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> InitResult:
        """Kafka's epoch bump: with no epoch named (or a fresh id) bump and forget the last
        epoch; the current epoch named: bump and remember it; the last epoch named: a retry of
        a bump whose answer was lost, answered again; any other epoch is fenced."""
        expected = producer_epoch != NO_PRODUCER_EPOCH
        current = txn.producer_epoch
        if expected and current != NO_PRODUCER_EPOCH and producer_epoch != current:
            if producer_epoch == txn.last_producer_epoch:
                return InitResult(ErrorCode.none, txn.producer_id, txn.producer_epoch)
            return InitResult(ErrorCode.producer_fenced)
        last_epoch = txn.producer_epoch if expected else NO_PRODUCER_EPOCH
        new_id, new_epoch = txn.producer_id, txn.producer_epoch + 1
        previous_id = txn.previous_producer_id
        if epoch_exhausted(txn.producer_epoch):
            try:
                new_id, new_epoch, previous_id = self._next_producer_id(), 0, txn.producer_id
            except OSError as exc:
                log.warning("no producer id for %r: %s", txn.transactional_id, exc)
                return InitResult(ErrorCode.coordinator_not_available)
        value = replace(
            txn.stored(), producer_id=new_id, producer_epoch=new_epoch, timeout_ms=timeout_ms,
            state=EMPTY, partitions=(), start_ms=-1, last_update_ms=self._clock.milliseconds(),
            previous_producer_id=previous_id,
        )  # fmt: skip
        error = await self._persist(txn, value, last_epoch)
        if error is not ErrorCode.none:
            return InitResult(error)
        return InitResult(ErrorCode.none, txn.producer_id, txn.producer_epoch)

    # ---- AddPartitionsToTxn, AddOffsetsToTxn --------------------------------------------------

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Collection[TopicPartition],
    ) -> ErrorCode:
        """Register `partitions` (which exist) in the producer's transaction, starting it."""
        txn, error = self._producer_transaction(transactional_id, producer_id, producer_epoch)
        if txn is None:
            return error
        if txn.state in (PREPARE_COMMIT, PREPARE_ABORT, PREPARE_EPOCH_FENCE):
            return ErrorCode.concurrent_transactions
        if txn.state is DEAD:
            return ErrorCode.invalid_producer_id_mapping
        if txn.state is ONGOING and set(partitions) <= txn.partitions:
            return ErrorCode.none
        now = self._clock.milliseconds()
        value = replace(
            txn.stored(), state=ONGOING, partitions=tuple(sorted(txn.partitions | set(partitions))),
            start_ms=txn.start_ms if txn.state is ONGOING else now, last_update_ms=now,
        )  # fmt: skip
        return await self._persist(txn, value)

    # ---- EndTxn -------------------------------------------------------------------------------

    async def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> ErrorCode:
        """Commit or abort: NONE once the decision is persisted (markers follow)."""
        txn, error = self._producer_transaction(transactional_id, producer_id, producer_epoch)
        if txn is None:
            return error
        state = txn.state
        if state is ONGOING:
            return await self._prepare(txn, commit)
        if state in (COMPLETE_COMMIT, COMPLETE_ABORT):
            # a retry of an EndTxn that completed is answered as it was
            done_as_asked = (state is COMPLETE_COMMIT) == commit
            return ErrorCode.none if done_as_asked else ErrorCode.invalid_txn_state
        if state in (PREPARE_COMMIT, PREPARE_ABORT):
            asked = (state is PREPARE_COMMIT) == commit
            return ErrorCode.concurrent_transactions if asked else ErrorCode.invalid_txn_state
        return ErrorCode.invalid_txn_state

    async def _prepare(
        self, txn: TransactionMetadata, commit: bool, epoch: int | None = None
    ) -> ErrorCode:
        value = replace(
            txn.stored(), state=PREPARE_COMMIT if commit else PREPARE_ABORT,
            producer_epoch=txn.producer_epoch if epoch is None else epoch,
            last_update_ms=self._clock.milliseconds(),
        )  # fmt: skip
        error = await self._persist(txn, value)
        if error is ErrorCode.none:
            self._spawn(self._complete(txn, commit))
        return error

    async def _fence_and_abort(self, txn: TransactionMetadata) -> ErrorCode:
        """Abort an Ongoing transaction under the next epoch, fencing its producer. The epoch
        is taken on only once the abort is written (a failed fence bumps from the same epoch
        next time)."""
        epoch = txn.producer_epoch if txn.producer_epoch >= MAX_EPOCH else txn.producer_epoch + 1
        log.info("aborting the transaction of %r (producer %d) and fencing epoch %d",
                 txn.transactional_id, txn.producer_id, txn.producer_epoch)  # fmt: skip
        check_transition(txn.state, PREPARE_EPOCH_FENCE)
        txn.state = PREPARE_EPOCH_FENCE
        try:
            return await self._prepare(txn, commit=False, epoch=epoch)
        finally:
            if txn.state is PREPARE_EPOCH_FENCE:  # the abort was not written: still Ongoing
                txn.state = ONGOING

    async def _complete(self, txn: TransactionMetadata, commit: bool) -> None:
        """Write the markers of a prepared transaction, then persist it as complete."""
        transactional_id = txn.transactional_id
        remaining = sorted(txn.partitions)
        backoff = self.config.marker_retry_backoff_ms
        while remaining:
            if self.transactions.get(transactional_id) is not txn:
                return  # no longer coordinated here
            remaining = await self._write_markers(txn, commit, remaining)
            if remaining:
                await self._sleep(backoff / 1000)
                backoff = min(backoff * 2, MAX_MARKER_BACKOFF_MS)
        value = replace(
            txn.stored(), state=COMPLETE_COMMIT if commit else COMPLETE_ABORT, partitions=(),
            last_update_ms=self._clock.milliseconds(),
        )  # fmt: skip
        backoff = self.config.marker_retry_backoff_ms
        while self.transactions.get(transactional_id) is txn:
            if await self._persist(txn, value) is ErrorCode.none:
                return
            await self._sleep(backoff / 1000)
            backoff = min(backoff * 2, MAX_MARKER_BACKOFF_MS)

    async def _write_markers(
        self, txn: TransactionMetadata, commit: bool, partitions: list[TopicPartition]
    ) -> list[TopicPartition]:
        """Markers for `partitions`; the partitions to try again."""
        coordinator_epoch = self.store.coordinator_epoch(txn.transactional_id)
        try:
            results = await self.markers.write_markers(
                txn.producer_id, txn.producer_epoch, coordinator_epoch, commit, partitions
            )
        except Exception:
            log.exception("writing markers for %r failed", txn.transactional_id)
            return partitions
        retry = []
        for tp in partitions:
            error = results.get(tp, ErrorCode.unknown_server_error)
            if error is ErrorCode.unknown_topic_or_partition:
                log.warning("%s-%d is gone: no %s marker for %r", tp[0], tp[1],
                            "commit" if commit else "abort", txn.transactional_id)  # fmt: skip
            elif error is not ErrorCode.none:
                retry.append(tp)
                log.warning("%s marker for %r on %s-%d failed (%s); retrying",
                            "commit" if commit else "abort", txn.transactional_id, tp[0], tp[1],
                            error.name)  # fmt: skip
        return retry

    # ---- persistence --------------------------------------------------------------------------

    async def _persist(
        self, txn: TransactionMetadata, value: TxnLogValue, last_epoch: int | None = None
    ) -> ErrorCode:
        """Write `value` as the id's new state, and take it on once written."""
        txn.pending = value.state
        try:
            error = await self.store.write(txn.transactional_id, value)
        finally:
            txn.pending = None
        if error is ErrorCode.none:
            if self.transactions.get(txn.transactional_id) is not txn:
                return ErrorCode.not_coordinator  # unloaded while the write was in flight
            txn.apply(value, last_epoch)
        return error

    # ---- checks -------------------------------------------------------------------------------

    def _coordinator_error(self, transactional_id: str) -> ErrorCode:
        """NOT_COORDINATOR unless this broker leads the id's partition. A partition's state is
        read in one step when its leadership arrives (as the group coordinator's), so no
        request ever sees it half loaded (COORDINATOR_LOAD_IN_PROGRESS)."""
        if not self.store.is_coordinator(transactional_id):
            return ErrorCode.not_coordinator
        return ErrorCode.none

    def _producer_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[TransactionMetadata | None, ErrorCode]:
        """The id's metadata if the request's producer owns it and no write of its state is in
        flight, else the error to answer."""
        txn, error = self._owned(transactional_id, producer_id, producer_epoch)
        if txn is not None and txn.pending is not None:
            return None, ErrorCode.concurrent_transactions
        return txn, error

    def _owned(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[TransactionMetadata | None, ErrorCode]:
        """The id's metadata if this broker coordinates it and the request's producer (id and
        epoch) owns it, else the error to answer."""
        if not transactional_id:
            return None, ErrorCode.invalid_request
        error = self._coordinator_error(transactional_id)
        if error is not ErrorCode.none:
            return None, error
        txn = self.transactions.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return None, ErrorCode.invalid_producer_id_mapping
        if txn.producer_epoch != producer_epoch:
            return None, ErrorCode.producer_fenced
        return txn, ErrorCode.none

    # ---- time ---------------------------------------------------------------------------------

    def tick(self) -> None:
        """Abort transactions open past their timeout; expire idle transactional ids."""
        self._start_pending_completions()
        now = self._clock.monotonic_ms()
        if now - self._last_abort_check >= self.config.abort_timed_out_interval_ms:
            self._last_abort_check = now
            self.abort_timed_out()
        if now - self._last_expiry_check >= self.config.remove_expired_interval_ms:
            self._last_expiry_check = now
            self.expire_transactional_ids()

    def abort_timed_out(self) -> list[str]:
        """Start aborting every Ongoing transaction older than its timeout; their ids."""
        now = self._clock.milliseconds()
        expired = [txn for txn in self.transactions.values()
                   if txn.state is ONGOING and txn.pending is None
                   and txn.start_ms + txn.timeout_ms <= now]  # fmt: skip
        for txn in expired:
            log.info("transaction of %r timed out after %d ms", txn.transactional_id,
                     txn.timeout_ms)  # fmt: skip
            self._spawn(self._abort_in_background(txn))
        return [txn.transactional_id for txn in expired]

    async def _abort_in_background(self, txn: TransactionMetadata) -> None:
        error = await self._fence_and_abort(txn)
        if error is not ErrorCode.none:
            log.warning("aborting the timed-out transaction of %r failed: %s",
                        txn.transactional_id, error.name)  # fmt: skip

    def expire_transactional_ids(self) -> list[str]:
        """Remove ids idle longer than transactional.id.expiration.ms; their ids."""
        cutoff = self._clock.milliseconds() - self.config.transactional_id_expiration_ms
        expired = [txn for txn in self.transactions.values()
                   if txn.state.expiration_allowed and txn.pending is None
                   and txn.last_update_ms <= cutoff]  # fmt: skip
        for txn in expired:
            self._spawn(self._remove(txn))
        return [txn.transactional_id for txn in expired]

    async def _remove(self, txn: TransactionMetadata) -> None:
        txn.pending = DEAD
        try:
            error = await self.store.write(txn.transactional_id, None)
        finally:
            txn.pending = None
        if error is ErrorCode.none and self.transactions.get(txn.transactional_id) is txn:
            txn.state = DEAD
            del self.transactions[txn.transactional_id]

    # ---- admin --------------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> TransactionDescription:
        error = self._coordinator_error(transactional_id)
        txn = self.transactions.get(transactional_id) if error is ErrorCode.none else None
        if error is ErrorCode.none and txn is None:
            error = ErrorCode.transactional_id_not_found
        if txn is None:
            return TransactionDescription(error, transactional_id)
        return TransactionDescription(
            ErrorCode.none, transactional_id, txn.state, txn.timeout_ms, txn.start_ms,
            txn.producer_id, txn.producer_epoch, tuple(sorted(txn.partitions)),
        )  # fmt: skip

    def list_transactions(
        self,
        states: Iterable[TxnState] = (),
        producer_ids: Iterable[int] = (),
        *,
        min_duration_ms: int = -1,
        transactional_id_pattern: str | None = None,
    ) -> list[TransactionListing]:
        """The ids coordinated here, filtered as ListTransactions filters them: by state, by
        producer id, by running longer than `min_duration_ms`, by a regular expression."""
        wanted_states, wanted_ids = set(states), set(producer_ids)
        pattern = re.compile(transactional_id_pattern) if transactional_id_pattern else None
        now = self._clock.milliseconds()
        out = []
        for txn in sorted(self.transactions.values(), key=lambda t: t.transactional_id):
            if wanted_states and txn.state not in wanted_states:
                continue
            if wanted_ids and txn.producer_id not in wanted_ids:
                continue
            if min_duration_ms >= 0 and (txn.state is not ONGOING
                                         or now - txn.start_ms <= min_duration_ms):  # fmt: skip
                continue
            if pattern is not None and not pattern.search(txn.transactional_id):
                continue
            out.append(TransactionListing(txn.transactional_id, txn.producer_id, txn.state))
        return out

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """KIP-890's question from a partition leader (AddPartitionsToTxn with verify_only):
        is each partition part of this producer's ongoing transaction? NONE where it is,
        INVALID_TXN_STATE where not; for all of them INVALID_PRODUCER_ID_MAPPING (another
        producer id), PRODUCER_FENCED (another epoch), CONCURRENT_TRANSACTIONS (the
        transaction is ending) or NOT_COORDINATOR."""
        partitions = list(partitions)
        txn, error = self._verifiable(transactional_id, producer_id, producer_epoch)
        if txn is None:
            return dict.fromkeys(partitions, error)
        ongoing = txn.state is ONGOING
        return {tp: ErrorCode.none if ongoing and tp in txn.partitions
                else ErrorCode.invalid_txn_state for tp in partitions}  # fmt: skip

    def _verifiable(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[TransactionMetadata | None, ErrorCode]:
        txn, error = self._owned(transactional_id, producer_id, producer_epoch)
        if txn is not None and txn.state in (PREPARE_COMMIT, PREPARE_ABORT, PREPARE_EPOCH_FENCE):
            return None, ErrorCode.concurrent_transactions
        return txn, error

    def ongoing_partitions(self) -> dict[TopicPartition, list[TransactionListing]]:
        """For each partition in an open transaction, the transactions that include it (what
        hanging-transaction detection compares with the partitions' producer state)."""
        out: dict[TopicPartition, list[TransactionListing]] = {}
        for txn in self.transactions.values():
            if txn.state in (ONGOING, PREPARE_COMMIT, PREPARE_ABORT):
                for tp in txn.partitions:
                    listing = TransactionListing(txn.transactional_id, txn.producer_id, txn.state)
                    out.setdefault(tp, []).append(listing)
        return out


def _valid_producer(txn: TransactionMetadata, producer_id: int, producer_epoch: int) -> bool:
    """Kafka's KIP-360 check of the producer id a re-initialising producer names: none given,
    a fresh id, the current producer id, or the previous one at an exhausted epoch (a retry)."""
    if producer_id < 0 or txn.producer_epoch == NO_PRODUCER_EPOCH:
        return True
    if producer_id == txn.producer_id:
        return True
    return producer_id == txn.previous_producer_id and epoch_exhausted(producer_epoch)
