"""The controller's leader and ISR decisions, against Kafka's ZooKeeper-era controller.

Notation in the tables: R is the replica assignment, L the leader, ISR the in-sync replicas,
live the registered brokers. Kafka elects, for a partition whose leader is gone, the first
replica *in assignment order* that is live and in the ISR (OfflinePartitionLeaderElection);
only `unclean.leader.election.enable` lets an out-of-sync replica lead, and then the ISR is it
alone. With no candidate the partition is offline (leader -1) and keeps its last ISR member.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weir.cluster.elections import (
    after_live_change,
    elect_offline_leader,
    imbalanced,
    new_partition_state,
    preferred_leader,
)
from weir.cluster.znodes import NO_LEADER, PartitionState

#: the epoch of the controller making the decisions; distinct from every leader epoch used
CONTROLLER_EPOCH = 7
OLD_EPOCH = 3


def state(leader: int, isr: Sequence[int], leader_epoch: int = OLD_EPOCH) -> PartitionState:
    return PartitionState(
        leader=leader, leader_epoch=leader_epoch, isr=tuple(isr), controller_epoch=1
    )


def change(
    before: PartitionState, replicas: Sequence[int], live: set[int], *, unclean: bool = False
) -> PartitionState | None:
    return after_live_change(before, replicas, live, CONTROLLER_EPOCH, unclean=unclean)


# ---- a new partition ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("replicas", "live", "leader", "isr"),
    [
        pytest.param((1, 2, 3), {1, 2, 3}, 1, (1, 2, 3), id="all-live"),
        pytest.param((3, 1, 2), {1, 2, 3}, 3, (3, 1, 2), id="assignment-order-not-id-order"),
        pytest.param((1, 2, 3), {2, 3, 9}, 2, (2, 3), id="first-replica-down"),
        pytest.param((1, 2, 3), {3}, 3, (3,), id="only-the-last-live"),
    ],
)
def test_a_new_partition_is_led_by_its_first_live_replica(
    replicas: tuple[int, ...], live: set[int], leader: int, isr: tuple[int, ...]
) -> None:
    assert new_partition_state(replicas, live, CONTROLLER_EPOCH) == PartitionState(
        leader=leader, leader_epoch=0, isr=isr, controller_epoch=CONTROLLER_EPOCH
    )


@pytest.mark.parametrize("live", [set(), {4, 5}], ids=["no-brokers", "only-other-brokers"])
def test_a_new_partition_without_a_live_replica_gets_no_state(live: set[int]) -> None:
    assert new_partition_state((1, 2, 3), live, CONTROLLER_EPOCH) is None


# ---- choosing a leader for an offline partition ------------------------------------------------


@pytest.mark.parametrize(
    ("replicas", "isr", "live", "unclean", "expected"),
    [
        pytest.param((1, 2, 3), (1, 3, 2), {2, 3}, False, (2, True), id="assignment-order"),
        pytest.param((1, 2, 3), (1, 3), {2, 3}, False, (3, True), id="skips-out-of-sync"),
        pytest.param((1, 2, 3), (1, 3), {2, 3}, True, (3, True), id="clean-beats-unclean"),
        pytest.param((1, 2, 3), (1,), {3, 2}, True, (2, False), id="unclean-assignment-order"),
        pytest.param((1, 2, 3), (1,), {2, 3}, False, None, id="no-live-isr"),
        pytest.param((1, 2, 3), (1, 2), {4}, True, None, id="no-live-replica"),
        pytest.param((1, 2), (1, 2, 4), {4}, False, None, id="isr-outsider-never-leads"),
    ],
)
def test_elect_offline_leader(
    replicas: tuple[int, ...],
    isr: tuple[int, ...],
    live: set[int],
    unclean: bool,
    expected: tuple[int, bool] | None,
) -> None:
    assert elect_offline_leader(replicas, isr, live, unclean=unclean) == expected


# ---- reacting to a change of the live broker set -----------------------------------------------

R = (1, 2, 3)

UNCHANGED = [
    pytest.param(R, state(1, R), {1, 2, 3}, False, id="nothing-changed"),
    pytest.param(R, state(1, R), {1, 2, 3, 4}, False, id="a-foreign-broker-joined"),
    pytest.param(R, state(1, (1, 2)), {1, 2, 3}, False, id="follower-back-leader-expands-isr"),
    pytest.param(R, state(1, (1, 2)), {1, 2}, False, id="out-of-sync-follower-gone"),
    pytest.param(R, state(NO_LEADER, (2,)), {3}, False, id="leaderless-stays-leaderless"),
    pytest.param(R, state(NO_LEADER, (2,)), set(), True, id="leaderless-nothing-live"),
]


@pytest.mark.parametrize(("replicas", "before", "live", "unclean"), UNCHANGED)
def test_no_change_is_none(
    replicas: tuple[int, ...], before: PartitionState, live: set[int], unclean: bool
) -> None:
    assert change(before, replicas, live, unclean=unclean) is None


CHANGED = [
    # a follower goes away: it leaves the ISR, the leader stays
    pytest.param(R, state(1, R), {1, 3}, False, 1, (1, 3), id="follower-gone"),
    pytest.param(R, state(1, R), {1}, False, 1, (1,), id="both-followers-gone"),
    pytest.param(R, state(3, (3, 1, 2)), {3, 2}, False, 3, (3, 2), id="isr-order-kept"),
    # the leader goes away with clean candidates
    pytest.param(R, state(1, R), {2, 3}, False, 2, (2, 3), id="leader-gone"),
    pytest.param(R, state(1, (1, 3, 2)), {2, 3}, False, 2, (3, 2), id="assignment-not-isr-order"),
    pytest.param((3, 1, 2), state(1, (1, 2, 3)), {2, 3}, False, 3, (2, 3), id="not-by-id"),
    pytest.param(R, state(1, (1, 3)), {2, 3}, False, 3, (3,), id="out-of-sync-skipped"),
    pytest.param(R, state(1, (1, 3)), {2, 3}, True, 3, (3,), id="clean-preferred-to-unclean"),
    pytest.param(R, state(1, R), {3}, False, 3, (3,), id="leader-and-follower-gone"),
    # no live ISR member, unclean election off: offline, the last ISR member kept
    pytest.param(R, state(1, (1, 2)), {3}, False, NO_LEADER, (2,), id="isr-gone"),
    pytest.param(R, state(1, (1,)), {2, 3}, False, NO_LEADER, (1,), id="sole-isr-leader-gone"),
    pytest.param(R, state(1, R), set(), False, NO_LEADER, (3,), id="everything-gone"),
    # unclean election on: the first live replica in assignment order, alone in the ISR
    pytest.param((1, 2, 3, 4), state(1, (1, 2)), {4, 3}, True, 3, (3,), id="unclean"),
    pytest.param(R, state(1, (1, 2)), set(), True, NO_LEADER, (2,), id="unclean-none-live"),
    # an offline partition comes back
    pytest.param(R, state(NO_LEADER, (1,)), {1, 3}, False, 1, (1,), id="kept-isr-member-back"),
    pytest.param(R, state(NO_LEADER, (1,)), {3}, True, 3, (3,), id="leaderless-unclean"),
    pytest.param(R, state(NO_LEADER, (2,)), {1, 2}, True, 2, (2,), id="leaderless-clean-first"),
]


@pytest.mark.parametrize(("replicas", "before", "live", "unclean", "leader", "isr"), CHANGED)
def test_a_change_bumps_the_leader_epoch_and_stamps_the_controller_epoch(
    replicas: tuple[int, ...],
    before: PartitionState,
    live: set[int],
    unclean: bool,
    leader: int,
    isr: tuple[int, ...],
) -> None:
    assert change(before, replicas, live, unclean=unclean) == PartitionState(
        leader=leader, leader_epoch=OLD_EPOCH + 1, isr=isr, controller_epoch=CONTROLLER_EPOCH
    )


@pytest.mark.parametrize(("replicas", "before", "live", "unclean", "leader", "isr"), CHANGED)
def test_a_second_call_with_the_same_live_set_changes_nothing(
    replicas: tuple[int, ...],
    before: PartitionState,
    live: set[int],
    unclean: bool,
    leader: int,
    isr: tuple[int, ...],
) -> None:
    after = change(before, replicas, live, unclean=unclean)
    assert after is not None
    assert change(after, replicas, live, unclean=unclean) is None


def test_the_dead_leader_comes_back_and_is_elected_from_the_kept_isr() -> None:
    # A controller failover halfway through checks that each state carries its controller.
    start = new_partition_state(R, {1, 2, 3}, controller_epoch=1)
    assert start == PartitionState(leader=1, leader_epoch=0, isr=(1, 2, 3), controller_epoch=1)
    shrunk = after_live_change(start, R, {1, 2}, 1, unclean=False)
    assert shrunk == PartitionState(leader=1, leader_epoch=1, isr=(1, 2), controller_epoch=1)
    alone = after_live_change(shrunk, R, {1}, 2, unclean=False)
    assert alone == PartitionState(leader=1, leader_epoch=2, isr=(1,), controller_epoch=2)
    offline = after_live_change(alone, R, set(), 2, unclean=False)
    assert offline == PartitionState(leader=NO_LEADER, leader_epoch=3, isr=(1,), controller_epoch=2)
    assert after_live_change(offline, R, set(), 2, unclean=False) is None
    # An out-of-sync replica returning does not bring the partition back without unclean election.
    assert after_live_change(offline, R, {3}, 2, unclean=False) is None
    back = after_live_change(offline, R, {3, 1}, 3, unclean=False)
    assert back == PartitionState(leader=1, leader_epoch=4, isr=(1,), controller_epoch=3)


# ---- properties --------------------------------------------------------------------------------

brokers = st.integers(min_value=0, max_value=5)


@st.composite
def histories(
    draw: st.DrawFn,
) -> tuple[tuple[int, ...], frozenset[int], list[tuple[frozenset[int], bool, bool]]]:
    """An assignment, the first live set, then steps of (live set, unclean, leader expands ISR)."""
    replicas = tuple(draw(st.lists(brokers, min_size=1, max_size=4, unique=True)))
    first = draw(st.frozensets(st.sampled_from(replicas), min_size=1))
    steps = draw(
        st.lists(st.tuples(st.frozensets(brokers), st.booleans(), st.booleans()), max_size=12)
    )
    return replicas, first, steps


def expanded(
    before: PartitionState, replicas: Sequence[int], live: frozenset[int]
) -> PartitionState:
    """The leader taking caught-up followers back, as AlterIsr would; last replica first, so that
    ISR order and assignment order differ. A leader's ISR change keeps the leader epoch."""
    if before.leader == NO_LEADER:
        return before
    joining = tuple(r for r in reversed(replicas) if r in live and r not in before.isr)
    return replace(before, isr=before.isr + joining)


@settings(max_examples=300, deadline=None)
@given(history=histories())
def test_every_decision_keeps_kafkas_invariants(
    history: tuple[tuple[int, ...], frozenset[int], list[tuple[frozenset[int], bool, bool]]],
) -> None:
    replicas, live, steps = history
    current = new_partition_state(replicas, live, 0)
    assert current is not None
    for controller_epoch, (new_live, unclean, expand) in enumerate(steps, start=1):
        if expand:
            current = expanded(current, replicas, live)
        live = new_live
        after = after_live_change(current, replicas, live, controller_epoch, unclean=unclean)
        if after is None:
            result = current
        else:
            assert after.leader_epoch == current.leader_epoch + 1
            assert after.controller_epoch == controller_epoch
            assert (after.leader, after.isr) != (current.leader, current.isr)
            result = after
        if result.leader == NO_LEADER:
            # offline only when no one may lead
            assert not any(r in live and r in current.isr for r in replicas)
            assert not (unclean and any(r in live for r in replicas))
        else:
            assert result.leader in live and result.leader in replicas
            assert result.leader in result.isr
            assert set(result.isr) <= live, "a dead broker in the ISR of a led partition"
            if not unclean:
                assert result.leader in current.isr, "unclean leader with unclean election off"
            if result.leader != current.leader and result.leader in current.isr:
                first_clean = next(r for r in replicas if r in live and r in current.isr)
                assert result.leader == first_clean
        assert result.isr and set(result.isr) <= set(replicas)
        assert after_live_change(result, replicas, live, controller_epoch, unclean=unclean) is None
        current = result


@settings(max_examples=150, deadline=None)
@given(
    replicas=st.lists(brokers, min_size=1, max_size=5, unique=True),
    live=st.frozensets(brokers),
    controller_epoch=st.integers(0, 2**31 - 1),
)
def test_a_new_partition_state_is_every_live_replica_in_assignment_order(
    replicas: list[int], live: frozenset[int], controller_epoch: int
) -> None:
    started = new_partition_state(replicas, live, controller_epoch)
    alive = tuple(r for r in replicas if r in live)
    if not alive:
        assert started is None
    else:
        assert started == PartitionState(
            leader=alive[0], leader_epoch=0, isr=alive, controller_epoch=controller_epoch
        )


# ---- preferred leader election -----------------------------------------------------------------


def test_the_preferred_replica_takes_leadership_back_when_live_and_in_sync() -> None:
    state = PartitionState(leader=2, leader_epoch=4, isr=(2, 1, 3), controller_epoch=1)
    moved = preferred_leader(state, (1, 2, 3), {1, 2, 3}, controller_epoch=3)
    assert moved == PartitionState(leader=1, leader_epoch=5, isr=(2, 1, 3), controller_epoch=3)


@pytest.mark.parametrize(
    ("leader", "isr", "live"),
    [
        (1, (1, 2, 3), {1, 2, 3}),  # already the leader
        (2, (2, 3), {1, 2, 3}),  # not in sync
        (2, (2, 1, 3), {2, 3}),  # not live
    ],
    ids=["already-leader", "out-of-sync", "dead"],
)
def test_the_preferred_replica_is_not_elected_when_it_may_not_lead(
    leader: int, isr: tuple[int, ...], live: set[int]
) -> None:
    state = PartitionState(leader=leader, leader_epoch=4, isr=isr, controller_epoch=1)
    assert preferred_leader(state, (1, 2, 3), live, controller_epoch=3) is None


# ---- leader balance ----------------------------------------------------------------------------


def _led(leader: int, isr: tuple[int, ...] = (1, 2, 3)) -> PartitionState:
    return PartitionState(leader=leader, leader_epoch=1, isr=isr, controller_epoch=1)


def test_a_broker_leading_too_few_of_its_preferred_partitions_gets_them_back() -> None:
    # broker 1 is preferred for 0..9 and leads 8 of them: 20% elsewhere, above 10%
    partitions = {i: ((1, 2, 3), _led(1 if i < 8 else 2)) for i in range(10)}
    assert imbalanced(partitions, {1, 2, 3}, per_broker_percentage=10) == [8, 9]


def test_an_imbalance_at_or_below_the_percentage_is_left_alone() -> None:
    partitions = {i: ((1, 2, 3), _led(1 if i < 9 else 2)) for i in range(10)}  # 10%: not above
    assert imbalanced(partitions, {1, 2, 3}, per_broker_percentage=10) == []
    assert imbalanced(partitions, {1, 2, 3}, per_broker_percentage=0) == [9]


def test_only_live_in_sync_preferred_replicas_take_leadership_back() -> None:
    partitions = {
        "a": ((1, 2, 3), _led(2)),
        "b": ((1, 2, 3), _led(2, isr=(2, 3))),  # broker 1 out of sync: stays
        "c": ((3, 1, 2), _led(1)),  # broker 3 is not live
        "d": ((2, 3, 1), _led(2)),  # balanced
    }
    assert imbalanced(partitions, {1, 2}, per_broker_percentage=10) == ["a"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.permutations([1, 2, 3]), st.sampled_from([1, 2, 3])), max_size=30),
       st.integers(min_value=0, max_value=100))  # fmt: skip
def test_rebalancing_moves_only_partitions_away_from_their_preferred_leader(
    layout: list[tuple[list[int], int]], percentage: int
) -> None:
    partitions = {i: (tuple(r), _led(leader)) for i, (r, leader) in enumerate(layout)}
    moves = imbalanced(partitions, {1, 2, 3}, percentage)
    for key in moves:
        replicas, state = partitions[key]
        assert state.leader != replicas[0]
    after = {k: (r, _led(r[0]) if k in moves else s) for k, (r, s) in partitions.items()}
    assert imbalanced(after, {1, 2, 3}, percentage) == []
