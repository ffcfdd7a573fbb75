"""Back-pressure decisions: partitions paused at their share of the bound, everything at the
bound until a share is free, resumed at half their share; fetch sizes that leave room for the
other partitions."""

from __future__ import annotations

from weir.consumer.backpressure import BackPressure, Decision

BOUND = 100


def apply(pressure: BackPressure[str], buffered: dict[str, int], total: int) -> Decision[str]:
    decision = pressure.decide(buffered, total)
    pressure.record(decision, buffered)
    return decision


def test_a_handler_that_keeps_up_never_causes_a_pause() -> None:
    pressure: BackPressure[str] = BackPressure(BOUND, fetch_batch=80)
    decision = apply(pressure, {"a": 40, "b": 9}, total=49)  # under half the bound
    assert decision == Decision([], [], False)
    assert pressure.fetch_count(total=49, partitions=2) == 50  # the rest of the bound


def test_under_pressure_partitions_at_their_share_are_paused() -> None:
    pressure: BackPressure[str] = BackPressure(BOUND, fetch_batch=80)
    decision = apply(pressure, {"a": 45, "b": 10, "c": 0, "d": 0}, total=55)
    assert decision == Decision(["a"], [], False)  # share: 100 / 4 = 25
    assert pressure.fetch_count(total=55, partitions=4) == 25  # one share at a time now
    decision = apply(pressure, {"a": 30, "b": 25, "c": 0, "d": 0}, total=55)
    assert decision == Decision(["b"], [], False)
    decision = apply(pressure, {"a": 12, "b": 20, "c": 20, "d": 0}, total=52)
    assert decision == Decision([], ["a"], False)  # down to half its share
    assert pressure.paused == {"b"}


def test_the_bound_pauses_everything_until_one_share_of_it_is_free() -> None:
    pressure: BackPressure[str] = BackPressure(BOUND, fetch_batch=80)
    decision = apply(pressure, {"a": 50, "b": 30, "c": 20, "d": 0}, total=100)
    assert decision == Decision(["a", "b", "c", "d"], [], True)
    assert pressure.fetch_count(total=100, partitions=4) == 0
    # share: 100 / 4 = 25; 76 buffered leaves less than a share free
    assert apply(pressure, {"a": 45, "b": 25, "c": 6, "d": 0}, total=76) == Decision([], [], True)
    decision = apply(pressure, {"a": 45, "b": 24, "c": 6, "d": 0}, total=75)
    assert decision == Decision([], ["c", "d"], False)  # under half their share
    assert pressure.paused == {"a", "b"}
    assert pressure.fetch_count(total=75, partitions=4) == 25


def test_results_awaiting_a_commit_count_against_the_bound() -> None:
    pressure: BackPressure[str] = BackPressure(BOUND, fetch_batch=80)
    assert apply(pressure, {"a": 10}, total=100).saturated  # 90 of them are results
    assert pressure.fetch_count(total=100, partitions=1) == 0


def test_partitions_assigned_at_the_bound_start_paused_and_revoked_ones_are_forgotten() -> None:
    pressure: BackPressure[str] = BackPressure(BOUND, fetch_batch=80)
    assert pressure.assigned(["a"]) == []
    apply(pressure, {"a": 100}, total=100)
    assert pressure.assigned(["b"]) == ["b"]
    assert pressure.paused == {"a", "b"}
    apply(pressure, {"b": 0}, total=0)  # a was revoked
    assert pressure.paused == set()


def test_a_fetch_never_asks_for_more_than_the_room_left() -> None:
    pressure: BackPressure[str] = BackPressure(BOUND, fetch_batch=500)
    assert pressure.fetch_count(total=0, partitions=1) == 100
    assert pressure.fetch_count(total=97, partitions=1) == 3
    assert pressure.fetch_count(total=100, partitions=1) == 0
