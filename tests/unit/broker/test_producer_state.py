"""Idempotent producer checks: retries of the last five batches are answered, not appended."""

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


def fields(
    producer_id: int, epoch: int, sequence: int, count: int = 2, base: int = 0
) -> HeaderFields:
    records = [Record(offset=base + i, timestamp=0, key=None, value=b"v") for i in range(count)]
    spec = BatchSpec(producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)
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
    state.load([fields(7, 0, 0, base=10), fields(7, 0, 2, base=12)])
    duplicate = state.check(fields(7, 0, 2))
    assert duplicate is not None and duplicate.first_offset == 12
    assert state.check(fields(7, 0, 4)) is None
