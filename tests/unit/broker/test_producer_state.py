"""Idempotent producer checks: retries of the last five batches are answered, not appended.
Transactions: open ones bound the last stable offset; an ABORT marker yields the entry for the
log's aborted-transaction index. Snapshots: the state restored from its snapshot entries goes on
checking sequences and bounding the last stable offset."""

from __future__ import annotations

import pytest

from weir.broker.producer_state import (
    INVALID_PRODUCER_EPOCH,
    MAX_SEQUENCE,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    ProducerStateError,
    ProducerStateManager,
)
from weir.records import BatchHeader, BatchSpec, HeaderFields, Record, build_batch
from weir.storage.producer_snapshot import decode_snapshot, encode_snapshot
from weir.storage.txn_index import AbortedTxn


def fields(
    producer_id: int,
    epoch: int,
    sequence: int,
    count: int = 2,
    base: int = 0,
    *,
    transactional: bool = False,
    control: bool = False,
) -> HeaderFields:
    records = [Record(offset=base + i, timestamp=0, key=None, value=b"v") for i in range(count)]
    spec = BatchSpec(producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
                     transactional=transactional or control, control=control)  # fmt: skip
    return BatchHeader(build_batch(records, spec=spec)).fields()


def appended(state: ProducerStateManager, batch: HeaderFields, offset: int) -> None:
    assert state.check(batch) is None
    state.record(batch, offset)


def test_in_sequence_batches_are_accepted() -> None:
    state = ProducerStateManager()
    appended(state, fields(7, 0, 0), 0)
    appended(state, fields(7, 0, 2), 2)
    appended(state, fields(7, 0, 4), 4)


def test_a_retry_of_a_recent_batch_returns_its_original_offsets() -> None:
    state = ProducerStateManager()
    for i in range(6):
        appended(state, fields(7, 0, 2 * i), 100 + 2 * i)
    duplicate = state.check(fields(7, 0, 6))
    assert duplicate is not None and (duplicate.first_offset, duplicate.last_offset) == (106, 107)
    with pytest.raises(ProducerStateError) as too_old:  # batch 0 left the five-batch cache
        state.check(fields(7, 0, 0))
    assert too_old.value.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_gap_in_sequence_is_out_of_order() -> None:
    state = ProducerStateManager()
    appended(state, fields(7, 0, 0), 0)
    with pytest.raises(ProducerStateError) as gap:
        state.check(fields(7, 0, 5))
    assert gap.value.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER


def test_epochs_fence_older_producers_and_restart_sequences() -> None:
    state = ProducerStateManager()
    appended(state, fields(7, 1, 0), 0)
    with pytest.raises(ProducerStateError) as fenced:
        state.check(fields(7, 0, 2))
    assert fenced.value.error_code == INVALID_PRODUCER_EPOCH
    with pytest.raises(ProducerStateError):
        state.check(fields(7, 2, 9))  # a new epoch starts at sequence 0
    appended(state, fields(7, 2, 0), 2)


def test_sequences_wrap_around() -> None:
    state = ProducerStateManager()
    appended(state, fields(7, 0, MAX_SEQUENCE - 1), 0)  # covers MAX-1 and MAX
    appended(state, fields(7, 0, 0), 2)


def test_unknown_producers_and_plain_batches_are_not_checked() -> None:
    state = ProducerStateManager()
    assert state.check(fields(9, 3, 1234)) is None
    assert state.check(fields(-1, -1, -1)) is None


def test_state_is_rebuilt_from_batches_in_the_log() -> None:
    state = ProducerStateManager()
    state.load([(fields(7, 0, 0, base=10), None), (fields(7, 0, 2, base=12), None)])
    duplicate = state.check(fields(7, 0, 2))
    assert duplicate is not None and duplicate.first_offset == 12
    assert state.check(fields(7, 0, 4)) is None


# ---- transactions ------------------------------------------------------------------------------


def test_open_transactions_bound_the_last_stable_offset() -> None:
    state = ProducerStateManager()
    assert state.first_unstable_offset() is None
    appended(state, fields(7, 0, 0, transactional=True), 10)
    appended(state, fields(8, 0, 0, transactional=True), 12)
    appended(state, fields(7, 0, 2, transactional=True), 14)
    assert state.first_unstable_offset() == 10
    state.record(fields(7, 0, -1, count=1, control=True), 16, commit=True)
    assert state.first_unstable_offset() == 12
    state.record(fields(8, 0, -1, count=1, control=True), 17, commit=False)
    assert state.first_unstable_offset() is None


def test_an_abort_marker_yields_the_index_entry_with_the_last_stable_offset() -> None:
    state = ProducerStateManager()
    appended(state, fields(7, 0, 0, transactional=True), 10)
    appended(state, fields(8, 0, 0, transactional=True), 12)
    assert state.record(fields(8, 0, -1, count=1, control=True), 14, commit=True) is None
    # 7's abort leaves nothing open: the partition is stable right after its marker
    aborted = state.record(fields(7, 0, -1, count=1, control=True), 15, commit=False)
    assert aborted == AbortedTxn(producer_id=7, first_offset=10, last_offset=15,
                                 last_stable_offset=16)  # fmt: skip
    appended(state, fields(9, 0, 0, transactional=True), 16)
    appended(state, fields(7, 0, 2, transactional=True), 18)
    aborted = state.record(fields(7, 0, -1, count=1, control=True), 20, commit=False)
    assert aborted == AbortedTxn(7, 18, 20, 16)  # 9's transaction is still open at 16


def test_a_fencing_marker_raises_the_epoch_and_refuses_the_old_producer() -> None:
    state = ProducerStateManager()
    appended(state, fields(7, 0, 0, transactional=True), 0)
    state.record(fields(7, 1, -1, count=1, control=True), 2, commit=False)
    with pytest.raises(ProducerStateError) as refused:
        state.check(fields(7, 0, 2, transactional=True))
    assert refused.value.error_code == INVALID_PRODUCER_EPOCH


def test_markers_and_state_are_rebuilt_from_the_log() -> None:
    state = ProducerStateManager()
    state.load([
        (fields(7, 0, 0, base=0, transactional=True), None),
        (fields(7, 0, -1, count=1, base=2, control=True), False),
        (fields(8, 0, 0, base=3, transactional=True), None),
    ])  # fmt: skip
    assert state.first_unstable_offset() == 3


def test_loading_returns_the_aborted_transactions_met() -> None:
    state = ProducerStateManager()
    aborted = state.load([
        (fields(7, 0, 0, base=0, transactional=True), None),
        (fields(7, 0, -1, count=1, base=2, control=True), False),
        (fields(8, 0, 0, base=3, transactional=True), None),
    ])  # fmt: skip
    assert aborted == [AbortedTxn(7, 0, 2, 3)]


# ---- snapshots ---------------------------------------------------------------------------------


def _through_a_snapshot(state: ProducerStateManager) -> ProducerStateManager:
    return ProducerStateManager.restored(decode_snapshot(encode_snapshot(state.snapshot_entries())))


def test_sequence_checks_go_on_from_a_snapshot() -> None:
    state = ProducerStateManager()
    for i in range(3):
        appended(state, fields(7, 2, 10 * i, count=10), 100 + 10 * i)
    restored = _through_a_snapshot(state)
    duplicate = restored.check(fields(7, 2, 20, count=10))  # a retry of the last batch
    assert duplicate is not None and (duplicate.first_offset, duplicate.last_offset) == (120, 129)
    with pytest.raises(ProducerStateError) as gap:
        restored.check(fields(7, 2, 31, count=1))
    assert gap.value.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    with pytest.raises(ProducerStateError) as fenced:
        restored.check(fields(7, 1, 30, count=1))
    assert fenced.value.error_code == INVALID_PRODUCER_EPOCH
    assert restored.check(fields(7, 2, 30, count=1)) is None
    assert restored.producers[7].last_timestamp == state.producers[7].last_timestamp


def test_a_wrapped_sequence_survives_a_snapshot() -> None:
    state = ProducerStateManager()
    appended(state, fields(7, 0, MAX_SEQUENCE - 1, count=4), 0)  # MAX-1, MAX, 0, 1
    restored = _through_a_snapshot(state)
    duplicate = restored.check(fields(7, 0, MAX_SEQUENCE - 1, count=4))
    assert duplicate is not None and duplicate.first_offset == 0
    assert restored.check(fields(7, 0, 2, count=1)) is None


def test_open_transactions_and_marker_only_producers_survive_a_snapshot() -> None:
    state = ProducerStateManager()
    appended(state, fields(7, 0, 0, transactional=True), 10)
    state.record(fields(8, 3, -1, count=1, control=True), 12, commit=False)  # fencing marker
    restored = _through_a_snapshot(state)
    assert restored.first_unstable_offset() == 10
    assert restored.producers[8].epoch == 3 and not restored.producers[8].batches
    aborted = restored.record(fields(7, 0, -1, count=1, control=True), 13, commit=False)
    assert aborted == AbortedTxn(7, 10, 13, 14)
