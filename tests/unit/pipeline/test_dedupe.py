"""The log ETL's deduplication: which records are copies, the high waters a task reports and the
state the driver keeps, by the agent's headers and by declared fields."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from weir.logformats.batch import BatchParser
from weir.pipeline.dedupe import (
    HIGH_WATER_FILE,
    DedupeKey,
    DedupeKeyError,
    HighWaters,
    Seen,
    TaskDedupe,
    first_sightings,
    parse_window,
    positions_of,
    reported,
)
from weir.pipeline.kafka_io import header_column
from weir.pipeline.task_files import TaskFiles, line_counts, task_dedupe

AGENT = DedupeKey.parse("agent")
NONE = np.iinfo(np.int64).min


def records(
    rows: list[tuple[bytes | None, bytes | None, bytes]], first_offset: int = 0, partition: int = 0
) -> pa.RecordBatch:
    """Raw records as a range reader gives them with the agent's header columns: (agent,
    position, line) each."""
    size = len(rows)
    return pa.RecordBatch.from_pydict(
        {
            "key": pa.array([None] * size, pa.binary()),
            "value": pa.array([line for _, _, line in rows], pa.binary()),
            "topic": pa.array(["t"] * size),
            "partition": pa.array([partition] * size, pa.int32()),
            "offset": pa.array(range(first_offset, first_offset + size), pa.int64()),
            header_column("weir.agent"): pa.array([a for a, _, _ in rows], pa.binary()),
            header_column("weir.pos"): pa.array([p for _, p, _ in rows], pa.binary()),
        }
    )


def json_line(seq: int, host: str = "app-1", message: str | None = None) -> bytes:
    document = {"timestamp": f"2026-01-02T03:04:{seq % 60:02d}Z", "level": "info", "host": host,
                "message": message or f"event e{seq}", "seq": seq}  # fmt: skip
    return json.dumps(document).encode()


def test_a_position_that_does_not_rise_above_the_groups_highest_is_a_copy() -> None:
    groups = np.array([0, 0, 1, 0, -1, 1, 0, 0])
    positions = np.array([5, 6, 1, 5, 0, 1, 7, 6])
    keep, highest = first_sightings(groups, positions, np.array([4, NONE]))
    assert keep.tolist() == [True, True, True, False, True, False, True, False]
    assert highest.tolist() == [7, 1]


def test_a_position_at_or_below_the_floor_is_a_copy_and_the_floor_stays_if_nothing_rises() -> None:
    keep, highest = first_sightings(np.array([0, 0]), np.array([3, 4]), np.array([4]))
    assert keep.tolist() == [False, False]
    assert highest.tolist() == [4]


def test_positions_are_decimal_integers_or_null() -> None:
    values = pa.array([b"12", b"x", None, b"-3", b"1" * 19, b"007", b""])
    assert positions_of(values).to_pylist() == [12, None, None, None, None, 7, None]


def test_a_batch_sent_again_after_its_original_is_dropped_across_calls_and_agents() -> None:
    dedupe = TaskDedupe(AGENT, {("t", 0, b"a"): 1})
    first = records([(b"a", b"1", b"old"), (b"a", b"2", b"x2"), (b"b", b"1", b"y1"),
                     (b"a", b"3", b"x3")])  # fmt: skip
    assert dedupe.keep(first).tolist() == [False, True, True, True]
    again = records([(b"a", b"2", b"x2"), (b"a", b"3", b"x3"), (b"b", b"1", b"y1"),
                     (b"a", b"4", b"x4")], first_offset=4)  # fmt: skip
    assert dedupe.keep(again).tolist() == [False, False, False, True]
    assert dedupe.highest == {("t", 0, b"a"): 4, ("t", 0, b"b"): 1}
    assert dedupe.dropped == {("t", 0, b"a"): 3, ("t", 0, b"b"): 1}


def test_records_without_a_whole_key_are_kept() -> None:
    dedupe = TaskDedupe(AGENT, {})
    rows = records([(None, b"1", b"l"), (None, b"1", b"l"), (b"a", None, b"l"),
                    (b"a", b"one", b"l"), (b"a", b"one", b"l")])  # fmt: skip
    assert dedupe.keep(rows).tolist() == [True] * 5
    assert dedupe.highest == {} and dedupe.dropped == {}


def test_the_same_agent_in_another_partition_is_another_writer() -> None:
    dedupe = TaskDedupe(AGENT, {("t", 0, b"a"): 10})
    assert dedupe.keep(records([(b"a", b"3", b"l")], partition=1)).tolist() == [True]
    assert dedupe.highest == {("t", 1, b"a"): 3}


def test_high_waters_merge_to_the_highest_and_forget_writers_idle_beyond_the_window() -> None:
    state = HighWaters({("t", 0, b"a"): Seen(9, 1_000), ("t", 0, b"b"): Seen(4, 1_000)})
    after = state.merged({("t", 0, b"a"): 7, ("t", 1, b"a"): 2}, now_ms=5_000, window_s=10)
    assert after.seen == {("t", 0, b"a"): Seen(9, 5_000), ("t", 0, b"b"): Seen(4, 1_000),
                          ("t", 1, b"a"): Seen(2, 5_000)}  # fmt: skip
    later = after.merged({}, now_ms=12_000, window_s=10)
    assert set(later.seen) == {("t", 0, b"a"), ("t", 1, b"a")}
    assert HighWaters.from_bytes(later.to_bytes()).seen == later.seen


def test_the_drivers_file_is_what_a_task_starts_from(tmp_path: Path) -> None:
    assert task_dedupe(tmp_path, None) is None
    fresh = task_dedupe(tmp_path, "agent")
    assert fresh is not None and fresh.known == {}
    HighWaters({("t", 0, b"a"): Seen(3, 0)}).write(tmp_path / HIGH_WATER_FILE)
    dedupe = task_dedupe(tmp_path, "agent")
    assert dedupe is not None and dedupe.known == {("t", 0, b"a"): 3}


def test_keys_and_windows_as_written() -> None:
    assert DedupeKey.parse("agent") == DedupeKey(("weir.agent",), "weir.pos", headers=True)
    declared = DedupeKey.parse(" host, app : seq ")
    assert declared == DedupeKey(("host", "app"), "seq", headers=False)
    assert DedupeKey.parse(declared.spec()) == declared
    assert declared.header_names == () and AGENT.header_names == ("weir.agent", "weir.pos")
    for bad in ("seq", "host:", ":seq", "a,,b:seq"):
        with pytest.raises(DedupeKeyError):
            DedupeKey.parse(bad)
    assert [parse_window(w) for w in ("7d", "12h", "30m", "90s", "90")] == [
        604800, 43200, 1800, 90, 90,
    ]  # fmt: skip
    for bad in ("0", "-1d", "soon"):
        with pytest.raises(DedupeKeyError):
            parse_window(bad)


def run_task(
    tmp_path: Path, dedupe: TaskDedupe, batches: list[pa.RecordBatch]
) -> list[dict[str, object]]:
    files = TaskFiles(tmp_path, "part-0", BatchParser(year=2026), dedupe=dedupe)
    for batch in batches:
        files.add(batch)
    rows: list[dict[str, object]] = files.finish().to_pylist()
    return rows


def written(tmp_path: Path, rows: list[dict[str, object]], table: str) -> list[dict[str, object]]:
    files = [str(r["path"]) for r in rows if r["kind"] == "file"]
    paths = [path for path in files if path.startswith(table)]
    parsed = [str(r["path"]) for r in rows if r["kind"] == "parsed" and table == "logs"]
    found: list[dict[str, object]] = []
    for path in paths:
        found += pq.read_table(tmp_path / path).to_pylist()
    for path in parsed:
        with pa.memory_map(str(tmp_path / path)) as source:
            found += pa.ipc.open_stream(source).read_all().to_pylist()
    return found


def test_a_task_drops_copies_by_headers_before_it_parses_or_counts_them(tmp_path: Path) -> None:
    bad = b"e3 ~ no format reads this ~"
    batch = records([(b"a", b"1", json_line(1)), (b"a", b"2", json_line(2)), (b"a", b"3", bad),
                     (b"a", b"2", json_line(2)), (b"a", b"3", bad), (None, None, json_line(9)),
                     (None, None, json_line(9))])  # fmt: skip
    rows = run_task(tmp_path, TaskDedupe(AGENT, {}), [batch])
    logs = written(tmp_path, rows, "logs")
    assert sorted(r["offset"] for r in logs) == [0, 1, 5, 6]  # unnamed records are all kept
    assert [r["line"] for r in written(tmp_path, rows, "quarantine")] == [bad.decode()]
    assert sum(count.lines for count in line_counts(rows)) == 5
    marks = [r for r in rows if r["kind"] == "high-water"]
    assert [(r["topic"], r["partition"], r["identity"], r["position"], r["lines"])
            for r in marks] == [("t", 0, b"a", 3, 2)]  # fmt: skip
    assert reported(rows, "high-water") == ({("t", 0, b"a"): 3}, 2)


def test_a_declared_key_drops_copies_by_the_lines_fields(tmp_path: Path) -> None:
    key = DedupeKey.parse("host:seq")
    lines = [json_line(1), json_line(2), json_line(1, host="app-2"), json_line(2),
             json_line(1, message="same position, later: a copy"), b"unparsed 1",
             b"unparsed 1", json_line(3)]  # fmt: skip
    batch = records([(None, None, line) for line in lines])
    rows = run_task(tmp_path, TaskDedupe(key, {("t", 0, b"app-1"): 0}), [batch])
    logs = written(tmp_path, rows, "logs")
    assert sorted(r["offset"] for r in logs) == [0, 1, 2, 7]
    assert len(written(tmp_path, rows, "quarantine")) == 2  # no fields, no key: both kept
    assert reported(rows, "high-water") == ({("t", 0, b"app-1"): 3, ("t", 0, b"app-2"): 1}, 2)
