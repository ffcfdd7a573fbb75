"""Kafka's transaction states: their stored ids, their names and the transitions allowed."""

from __future__ import annotations

import pytest

from weir.broker.txn.state import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    DEAD,
    EMPTY,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    PREPARE_EPOCH_FENCE,
    IllegalTransitionError,
    TxnState,
    check_transition,
)

LEGAL = [
    (EMPTY, ONGOING), (COMPLETE_COMMIT, ONGOING), (COMPLETE_ABORT, ONGOING), (ONGOING, ONGOING),
    (ONGOING, PREPARE_COMMIT), (ONGOING, PREPARE_ABORT), (PREPARE_EPOCH_FENCE, PREPARE_ABORT),
    (PREPARE_COMMIT, COMPLETE_COMMIT), (PREPARE_ABORT, COMPLETE_ABORT),
    (ONGOING, PREPARE_EPOCH_FENCE), (COMPLETE_COMMIT, EMPTY), (COMPLETE_ABORT, EMPTY),
    (EMPTY, EMPTY), (EMPTY, DEAD), (COMPLETE_COMMIT, DEAD), (COMPLETE_ABORT, DEAD),
]  # fmt: skip


def test_state_ids_and_names_are_kafkas() -> None:
    ids = {state.value: state.id for state in TxnState}
    assert ids == {
        "Empty": 0, "Ongoing": 1, "PrepareCommit": 2, "PrepareAbort": 3, "CompleteCommit": 4,
        "CompleteAbort": 5, "Dead": 6, "PrepareEpochFence": 7,
    }  # fmt: skip
    assert all(TxnState.from_id(state.id) is state for state in TxnState)
    assert TxnState.from_name("PrepareCommit") is PREPARE_COMMIT
    assert TxnState.from_name("Stable") is None
    with pytest.raises(ValueError):
        TxnState.from_id(8)


@pytest.mark.parametrize(("current", "target"), LEGAL)
def test_legal_transitions(current: TxnState, target: TxnState) -> None:
    check_transition(current, target)


@pytest.mark.parametrize(
    ("current", "target"),
    [(a, b) for a in TxnState for b in TxnState if (a, b) not in LEGAL],
)
def test_every_other_transition_is_refused(current: TxnState, target: TxnState) -> None:
    with pytest.raises(IllegalTransitionError):
        check_transition(current, target)


def test_only_idle_states_may_expire() -> None:
    assert {s for s in TxnState if s.expiration_allowed} == {EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}
