"""The consumer group state machine: the TRANSITIONS table is the only authority."""

from __future__ import annotations

import itertools

import pytest

from weir.broker.group.group import Group
from weir.broker.group.state import (
    TRANSITIONS,
    GroupState,
    IllegalTransitionError,
    check_transition,
)

ALL_PAIRS = list(itertools.product(GroupState, GroupState))

# Kafka's GroupMetadata: each state's valid *previous* states, written out independently.
KAFKA_VALID_PREVIOUS = {
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE},
    GroupState.PREPARING_REBALANCE: {
        GroupState.STABLE,
        GroupState.COMPLETING_REBALANCE,
        GroupState.EMPTY,
    },
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE},
    GroupState.DEAD: set(GroupState),
}


def _pair_id(pair: tuple[GroupState, GroupState]) -> str:
    return f"{pair[0].value}->{pair[1].value}"


def test_every_state_has_a_row() -> None:
    assert set(TRANSITIONS) == set(GroupState)


def test_table_matches_kafka() -> None:
    for current, target in ALL_PAIRS:
        allowed = current in KAFKA_VALID_PREVIOUS[target]
        assert (target in TRANSITIONS[current]) == allowed, _pair_id((current, target))


def test_table_cannot_be_mutated() -> None:
    with pytest.raises(TypeError):
        TRANSITIONS[GroupState.DEAD] = frozenset(GroupState)  # type: ignore[index]


@pytest.mark.parametrize("pair", ALL_PAIRS, ids=_pair_id)
def test_check_transition_follows_table(pair: tuple[GroupState, GroupState]) -> None:
    current, target = pair
    if target in TRANSITIONS[current]:
        check_transition(current, target)
    else:
        with pytest.raises(IllegalTransitionError, match=f"{current.value} to {target.value}"):
            check_transition(current, target)


@pytest.mark.parametrize("pair", ALL_PAIRS, ids=_pair_id)
def test_group_transition_enforces_table(pair: tuple[GroupState, GroupState]) -> None:
    current, target = pair
    group = Group("g", state=current, state_timestamp=5)
    if target in TRANSITIONS[current]:
        group.transition(target, 42)
        assert group.state is target
        assert group.state_timestamp == 42
        assert group.is_(target)
    else:
        with pytest.raises(IllegalTransitionError):
            group.transition(target, 42)
        assert group.state is current
        assert group.state_timestamp == 5


def test_new_group_starts_empty() -> None:
    assert Group("g").state is GroupState.EMPTY


def test_full_lifecycle_path() -> None:
    group = Group("g")
    path = [
        GroupState.PREPARING_REBALANCE,
        GroupState.COMPLETING_REBALANCE,
        GroupState.STABLE,
        GroupState.PREPARING_REBALANCE,
        GroupState.EMPTY,
        GroupState.DEAD,
    ]
    for now, state in enumerate(path):
        group.transition(state, now)
    assert group.state is GroupState.DEAD
    with pytest.raises(IllegalTransitionError):
        group.transition(GroupState.EMPTY, 99)
