"""Consumer group states and the transitions allowed between them (Kafka's classic protocol).

    Empty --join--> PreparingRebalance --all joined--> CompletingRebalance --leader syncs--> Stable
      ^                 ^  |                               |                                 |
      |                 |  +--all left--> Empty            +--member change--> Preparing...   |
      +----- last member leaves / expires --------------------------------------------------+
    any state --group deleted or its offsets partition unloaded--> Dead

`TRANSITIONS[state]` is the set of states it may move to; `Group.transition` enforces it.
"""

from __future__ import annotations

import enum
from types import MappingProxyType


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

TRANSITIONS = MappingProxyType({
    EMPTY: frozenset({PREPARING, DEAD}),
    PREPARING: frozenset({COMPLETING, EMPTY, DEAD}),
    COMPLETING: frozenset({PREPARING, STABLE, DEAD}),
    STABLE: frozenset({PREPARING, DEAD}),
    DEAD: frozenset({DEAD}),
})  # fmt: skip


class IllegalTransitionError(Exception):
    pass


def check_transition(current: GroupState, target: GroupState) -> None:
    if target not in TRANSITIONS[current]:
        raise IllegalTransitionError(f"group cannot go from {current.value} to {target.value}")
