"""Offset options and read planning of the Spark source, without Spark or a broker."""

from __future__ import annotations

import pytest

from weir.pipeline.offsets import (
    EARLIEST,
    LATEST,
    DataLossError,
    OffsetOptionError,
    OffsetRange,
    Watermarks,
    admit,
    offsets_from_json,
    offsets_to_json,
    parse_offset_spec,
    plan_ranges,
    resolve,
    split_ranges,
)

MARKS = {("a", 0): Watermarks(log_start=5, high=100), ("a", 1): Watermarks(log_start=0, high=10)}


def test_specs_as_spark_spells_them() -> None:
    assert parse_offset_spec(None, default=EARLIEST, option="startingOffsets") == EARLIEST
    assert parse_offset_spec(" Latest ", default=EARLIEST, option="startingOffsets") == LATEST
    spec = parse_offset_spec('{"a": {"0": 23, "1": -2}}', default=LATEST, option="x")
    assert spec == {("a", 0): 23, ("a", 1): EARLIEST}
    with pytest.raises(OffsetOptionError, match="startingOffsets"):
        parse_offset_spec("soon", default=EARLIEST, option="startingOffsets")


def test_resolve_fills_unnamed_partitions_like_spark() -> None:
    assert resolve({("a", 0): 50}, MARKS, option="startingOffsets") == {("a", 0): 50, ("a", 1): 0}
    assert resolve({("a", 1): -1}, MARKS, option="endingOffsets") == {("a", 0): 100, ("a", 1): 10}
    with pytest.raises(OffsetOptionError, match="b-0"):
        resolve({("b", 0): 1}, MARKS, option="startingOffsets")


def test_start_below_log_start_is_data_loss() -> None:
    starts, ends = {("a", 0): 2, ("a", 1): 0}, {("a", 0): 100, ("a", 1): 10}
    with pytest.raises(DataLossError, match=r"offsets 2\.\.4 were deleted"):
        plan_ranges(starts, ends, MARKS, fail_on_data_loss=True)
    ranges, warnings = plan_ranges(starts, ends, MARKS, fail_on_data_loss=False)
    assert ranges[0] == OffsetRange(topic="a", partition=0, start=5, end=100)
    assert len(warnings) == 1


def test_split_covers_every_offset_once() -> None:
    ranges = [
        OffsetRange(topic="a", partition=0, start=5, end=100),
        OffsetRange(topic="a", partition=1, start=3, end=3),
        OffsetRange(topic="b", partition=0, start=0, end=5),
    ]
    pieces = split_ranges(ranges, 4)
    assert len(pieces) >= 4
    covered = sorted((p.topic, p.partition, o) for p in pieces for o in range(p.start, p.end))
    expected = sorted((r.topic, r.partition, o) for r in ranges for o in range(r.start, r.end))
    assert covered == expected
    assert split_ranges([OffsetRange(topic="a", partition=0, start=1, end=1)], 2) == []


def test_offsets_as_json_round_trip() -> None:
    offsets = {("b", 10): 7, ("a", 2): 5, ("a", 0): 1}
    document = offsets_to_json(offsets)
    assert document == {"a": {"0": 1, "2": 5}, "b": {"10": 7}}
    assert list(document) == ["a", "b"]
    assert offsets_from_json(document) == offsets


def test_admit_shares_the_limit_by_backlog() -> None:
    starts = {("a", 0): 0, ("a", 1): 100, ("a", 2): 50}
    ends = {("a", 0): 300, ("a", 1): 200, ("a", 2): 50}
    assert admit(starts, ends, 1000) == ends
    admitted = admit(starts, ends, 40)
    assert admitted == {("a", 0): 30, ("a", 1): 110, ("a", 2): 50}
    assert sum(admitted[tp] - starts[tp] for tp in starts) == 40


def test_admit_always_makes_progress() -> None:
    starts = {("a", 0): 0, ("a", 1): 0, ("a", 2): 0}
    ends = {("a", 0): 5, ("a", 1): 5, ("a", 2): 5}
    admitted = admit(starts, ends, 1)
    assert sum(admitted.values()) == 1
    assert all(admitted[tp] <= ends[tp] for tp in ends)
