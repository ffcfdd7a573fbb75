"""Transaction states and the transitions allowed between them (Kafka's TransactionState).

    Empty / CompleteCommit / CompleteAbort --AddPartitions, AddOffsets--> Ongoing
    Ongoing --EndTxn(commit)--> PrepareCommit --markers written--> CompleteCommit
    Ongoing --EndTxn(abort), timeout--> PrepareAbort --markers written--> CompleteAbort
    Ongoing --InitProducerId from a new producer, timeout--> PrepareEpochFence --> PrepareAbort
    Empty / CompleteCommit / CompleteAbort --transactional id expired--> Dead

`PREVIOUS[state]` is the set of states it may be entered from; each state's `id` is the byte
stored in the `__transaction_state` value, its `value` the name DescribeTransactions shows.
"""

from __future__ import annotations

import enum
from types import MappingProxyType


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"

    @property
    def id(self) -> int:
        return _IDS[self]

    @classmethod
    def from_id(cls, state_id: int) -> TxnState:
        for state, known in _IDS.items():
            if known == state_id:
                return state
        raise ValueError(f"unknown transaction state id {state_id}")

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        try:
            return cls(name)
        except ValueError:
            return None

    @property
    def expiration_allowed(self) -> bool:
        """A transactional id idle in this state may expire (it has no transaction open)."""
        return self in _AT_REST

    @property
    def is_prepared(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


EMPTY = TxnState.EMPTY
ONGOING = TxnState.ONGOING
PREPARE_COMMIT = TxnState.PREPARE_COMMIT
PREPARE_ABORT = TxnState.PREPARE_ABORT
COMPLETE_COMMIT = TxnState.COMPLETE_COMMIT
COMPLETE_ABORT = TxnState.COMPLETE_ABORT
DEAD = TxnState.DEAD
PREPARE_EPOCH_FENCE = TxnState.PREPARE_EPOCH_FENCE

_IDS = MappingProxyType({
    EMPTY: 0, ONGOING: 1, PREPARE_COMMIT: 2, PREPARE_ABORT: 3,
    COMPLETE_COMMIT: 4, COMPLETE_ABORT: 5, DEAD: 6, PREPARE_EPOCH_FENCE: 7,
})  # fmt: skip
_AT_REST = frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT})

PREVIOUS = MappingProxyType({
    EMPTY: frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    ONGOING: frozenset({ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    PREPARE_COMMIT: frozenset({ONGOING}),
    PREPARE_ABORT: frozenset({ONGOING, PREPARE_EPOCH_FENCE}),
    COMPLETE_COMMIT: frozenset({PREPARE_COMMIT}),
    COMPLETE_ABORT: frozenset({PREPARE_ABORT}),
    DEAD: frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    PREPARE_EPOCH_FENCE: frozenset({ONGOING}),
})  # fmt: skip


class IllegalTransitionError(Exception):
    pass


def check_transition(current: TxnState, target: TxnState) -> None:
    if current not in PREVIOUS[target]:
        raise IllegalTransitionError(
            f"a transaction cannot go from {current.value} to {target.value}"
        )
