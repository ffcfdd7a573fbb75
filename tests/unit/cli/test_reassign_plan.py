"""The plans `weir reassign` reads and `weir cluster drain` makes: only the leaving broker's
replicas move, to the least-loaded broker on a rack the partition does not use yet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from weir.cli.logdirs import read_log_dir_moves
from weir.cli.reassign import DrainError, drain_plan, plan_json, read_plan
from weir.cli.reassign_throttle import (
    BROKER,
    DELETE,
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    SET,
    TOPIC,
    Change,
    apply_throttle,
    check_rate,
    clear_throttles,
    throttle_plan,
)
from weir.cluster.placement import CONSISTENT_HASH, BrokerSpec, consistent_hash_assignment


def test_a_drain_moves_only_the_leaving_broker_s_replicas_and_spreads_them() -> None:
    assignment = {("t", 0): (1, 2), ("t", 1): (2, 3), ("t", 2): (3, 1), ("t", 3): (1, 3),
                  ("u", 0): (2,)}  # fmt: skip
    racks: dict[int, str | None] = {1: None, 2: None, 3: None, 4: None}
    plan = drain_plan(assignment, racks, 1)
    assert set(plan) == {("t", 0), ("t", 2), ("t", 3)}
    for tp, target in plan.items():
        kept = [r for r in assignment[tp] if r != 1]
        assert 1 not in target and len(set(target)) == len(target) == len(assignment[tp])
        assert [r for r in target if r in kept] == kept  # the others stay where they were
    assert plan[("t", 0)][0] == 4, "the empty broker takes the first one, in the leaver's place"
    counts = {b: sum(b in r for r in plan.values()) for b in (2, 3, 4)}
    assert counts[4] >= 2


def test_a_drain_keeps_replicas_on_distinct_racks_when_it_can() -> None:
    racks: dict[int, str | None] = {1: "a", 2: "b", 3: "b", 4: "c"}
    assignment = {("t", 0): (1, 2), ("u", 0): (4,)}
    # broker 3 holds less, but on rack b beside the replica that stays: 4 (rack c) is chosen
    assert drain_plan(assignment, racks, 1) == {("t", 0): (4, 2)}


def test_a_drain_that_has_nowhere_to_go_is_refused_whole() -> None:
    racks: dict[int, str | None] = {1: None, 2: None, 3: None}
    with pytest.raises(DrainError, match="t-0 \\(3 replicas\\)"):
        drain_plan({("t", 0): (1, 2, 3), ("t", 1): (1, 2)}, racks, 1)


def test_a_drain_keeps_each_topic_in_its_pool() -> None:
    racks: dict[int, str | None] = dict.fromkeys((1, 2, 3, 4, 5))
    pools = {1: "", 2: "", 3: "a", 4: "a", 5: "a"}
    assignment = {("pinned", 0): (3, 4), ("shared", 0): (1, 2)}
    plan = drain_plan(assignment, racks, 3, pools=pools, topic_pools={"pinned": "a"})
    assert plan == {("pinned", 0): (5, 4)}  # not 1 or 2, though they hold fewer replicas
    with pytest.raises(DrainError, match="in pool 'a'"):
        drain_plan({("pinned", 0): (3, 4, 5)}, racks, 3, pools=pools,
                   topic_pools={"pinned": "a"})  # fmt: skip


def test_reassignment_files_round_trip_and_bad_ones_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(plan_json({("t", 0): (1, 2), ("u", 3): (3,)}))
    assert read_plan(path) == {("t", 0): (1, 2), ("u", 3): (3,)}
    for bad, message in (
        ({"version": 1}, "lists no partitions"),
        ({"partitions": [{"topic": "t", "replicas": [1]}]}, "needs a topic, a partition"),
        ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1],
                          "log_dirs": ["/d", "any"]}]}, "one entry per replica"),
        ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1]}] * 2}, "twice"),
    ):  # fmt: skip
        path.write_text(json.dumps(bad))
        with pytest.raises(SystemExit, match=message):
            read_plan(path)


def test_a_throttle_lists_the_sources_and_the_added_replicas_of_moving_partitions() -> None:
    plan = {("t", 0): (1, 2, 3), ("t", 1): (2, 3), ("u", 0): (4,), ("u", 1): (1, 2)}
    current = {("t", 0): (1, 2), ("t", 1): (2, 3), ("u", 0): (1,), ("u", 1): (2, 1)}
    throttle = throttle_plan(plan, current)
    assert throttle.topics == {"t": ("0:1,0:2", "0:3"), "u": ("0:1,1:2,1:1", "0:4")}
    assert throttle.brokers == (1, 2, 3, 4), "every broker a move touches, none other"


class Recorded:
    def __init__(self) -> None:
        self.calls: list[tuple[int, str, list[Change], int | None]] = []

    def alter_configs(
        self, resource_type: int, name: str, changes: list[Change], broker: int | None
    ) -> str | None:
        self.calls.append((resource_type, name, changes, broker))
        return "INVALID_REQUEST: no" if name == "refuses" else None


def test_the_throttle_sets_topic_lists_then_broker_rates_and_clears_them_all() -> None:
    target = Recorded()
    throttle = throttle_plan({("t", 0): (1, 3)}, {("t", 0): (1, 2)})
    assert apply_throttle(target, throttle, 500, None) == []
    assert target.calls[0] == (TOPIC, "t", [(LEADER_REPLICAS, "0:1,0:2", SET),
                                            (FOLLOWER_REPLICAS, "0:3", SET)], None)  # fmt: skip
    rates = [(LEADER_RATE, "500", SET), (FOLLOWER_RATE, "500", SET)]
    assert target.calls[1:] == [(BROKER, str(b), rates, b) for b in (1, 2, 3)]
    target.calls.clear()
    assert clear_throttles(target, ["t", "refuses"], [1]) == ["topic refuses: INVALID_REQUEST: no"]
    assert [c[:2] for c in target.calls] == [(BROKER, "1"), (TOPIC, "refuses"), (TOPIC, "t")]
    assert all(op == DELETE for call in target.calls for _, _, op in call[2])


@pytest.mark.parametrize("value", [0, -1])
def test_a_throttle_of_zero_or_less_is_refused(value: int) -> None:
    with pytest.raises(SystemExit, match="must be a positive number"):
        check_rate("--throttle", value)
    check_rate("--throttle", None)


def test_a_drain_hands_a_consistent_hash_topics_replicas_to_the_ring_without_the_broker() -> None:
    brokers = [BrokerSpec(b) for b in range(1, 6)]
    placed = consistent_hash_assignment(brokers, "ring", 64, 3)
    assignment = {("ring", p): tuple(r) for p, r in placed.items()}
    racks: dict[int, str | None] = dict.fromkeys(range(1, 6))
    plan = drain_plan(assignment, racks, 5, {"ring": CONSISTENT_HASH})
    assert set(plan) == {tp for tp, r in assignment.items() if 5 in r}
    without = consistent_hash_assignment(brokers[:4], "ring", 64, 3)
    agree = 0
    for (topic, p), target in plan.items():
        before = assignment[(topic, p)]
        assert [r for r in target if r in before] == [r for r in before if r != 5]
        agree += set(target) == set(without[p])
    # (not every one: in the smaller ring, a later replica's walk can meet the replacement
    # broker before its own, and the ring would have placed the two the other way round)
    assert agree >= 0.8 * len(plan), "most moves land where the smaller ring puts them"
def test_log_dirs_of_a_reassignment_file_name_moves_and_must_be_absolute(tmp_path: Path) -> None:
    entries = [{"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "/b"]},
               {"topic": "u", "partition": 3, "replicas": [2], "log_dirs": ["/data/c"]},
               {"topic": "v", "partition": 1, "replicas": [1]}]  # fmt: skip
    assert read_log_dir_moves(entries, tmp_path) == {("t", 0, 2): "/b", ("u", 3, 2): "/data/c"}
    entries[1]["log_dirs"] = ["data/c"]
    with pytest.raises(SystemExit, match="u-3: log directory 'data/c' of broker 2 is not an "
                                         "absolute path"):  # fmt: skip
        read_log_dir_moves(entries, tmp_path)
