"""The plans `weir reassign` reads and `weir cluster drain` makes: only the leaving broker's
replicas move, to the least-loaded broker on a rack the partition does not use yet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from weir.cli.logdirs import read_log_dir_moves
from weir.cli.reassign import DrainError, drain_plan, plan_json, read_plan


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


def test_log_dirs_of_a_reassignment_file_name_moves_and_must_be_absolute(tmp_path: Path) -> None:
    entries = [{"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "/b"]},
               {"topic": "u", "partition": 3, "replicas": [2], "log_dirs": ["/data/c"]},
               {"topic": "v", "partition": 1, "replicas": [1]}]  # fmt: skip
    assert read_log_dir_moves(entries, tmp_path) == {("t", 0, 2): "/b", ("u", 3, 2): "/data/c"}
    entries[1]["log_dirs"] = ["data/c"]
    with pytest.raises(SystemExit, match="u-3: log directory 'data/c' of broker 2 is not an "
                                         "absolute path"):  # fmt: skip
        read_log_dir_moves(entries, tmp_path)
