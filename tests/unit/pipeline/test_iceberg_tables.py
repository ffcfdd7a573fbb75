"""The log ETL's Iceberg tables on a real SQLite catalog and real files: batch commits and their
replays, schema evolution, compaction and snapshot expiry, the maintenance command."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from weir.cli.main import main
from weir.pipeline.iceberg_tables import (
    BATCH_ID,
    OFFSETS,
    BatchIdentity,
    IcebergOutput,
    IcebergTables,
    batch_properties,
    compact,
    expire,
    held_batch,
)

STAMP = pa.timestamp("us", tz="UTC")
DAY_US = 86_400_000_000


def logs_rows(batch: int, *, lines: int = 4, extra: bool = False) -> pa.Table:
    """Rows of two sources over two days (and one without a timestamp)."""
    columns = {
        "timestamp": pa.array([(i % 2) * DAY_US + batch for i in range(lines - 1)] + [None], STAMP),
        "message": [f"batch {batch} line {i}" for i in range(lines)],
        "offset": pa.array([batch * 100 + i for i in range(lines)], pa.int64()),
        "source": ["hdfs" if i % 3 else "apache" for i in range(lines)],
    }
    if extra:
        columns["host"] = [f"host-{i}" for i in range(lines)]
    return pa.table(columns)


def templates_rows(count: int) -> pa.Table:
    return pa.table({"id": pa.array(range(count), pa.int64()), "source": ["hdfs"] * count,
                     "template": [f"t{i}" for i in range(count)]})  # fmt: skip


def batch(batch_id: int, query: str = "query-1") -> BatchIdentity:
    return BatchIdentity(query, batch_id, {"raw": {"0": 10 * (batch_id + 1), "1": 5}})


@pytest.fixture
def output(tmp_path: Path) -> IcebergOutput:
    return IcebergOutput(warehouse=tmp_path / "warehouse")


@pytest.fixture
def tables(output: IcebergOutput) -> Iterator[IcebergTables]:
    with IcebergTables(output) as opened:
        yield opened


def test_each_table_holds_a_batch_once_however_often_it_is_replayed(
    tables: IcebergTables,
) -> None:
    rows = {"logs": logs_rows(0), "templates": templates_rows(2)}
    assert tables.commit_batch(batch(0), rows) == ["logs", "templates"]
    assert tables.commit_batch(batch(0), rows) == []
    # A crash after the logs table's commit: the replay commits the rest only.
    assert tables.commit("logs", logs_rows(1), batch(1))
    assert tables.commit_batch(
        batch(1), {"logs": logs_rows(1), "templates": templates_rows(3)}
    ) == ["templates"]
    logs, templates = tables.load("logs"), tables.load("templates")
    assert logs.scan().count() == 8
    assert templates.scan().count() == 3  # each batch replaces the table
    assert held_batch(logs, "query-1") == held_batch(templates, "query-1") == 1
    assert held_batch(logs, "another-query") is None
    properties = batch_properties(logs)
    assert properties is not None
    assert properties[BATCH_ID] == "1"
    assert json.loads(properties[OFFSETS]) == {"raw": {"0": 20, "1": 5}}
    assert [field.name for field in logs.spec().fields] == ["source", "timestamp_day"]
    assert [field.name for field in templates.spec().fields] == ["source"]


def test_a_batch_with_a_new_column_adds_it(tables: IcebergTables) -> None:
    tables.commit("logs", logs_rows(0), batch(0))
    tables.commit("logs", logs_rows(1, extra=True), batch(1))
    logs = tables.load("logs")
    assert logs.schema().column_names[-1] == "host"
    hosts = logs.scan(selected_fields=("offset", "host")).to_arrow().to_pylist()
    assert sorted((r["offset"], r["host"]) for r in hosts if r["offset"] < 100) == [
        (0, None), (1, None), (2, None), (3, None)
    ]  # fmt: skip
    assert sorted(r["host"] for r in hosts if r["offset"] >= 100) == [f"host-{i}" for i in range(4)]


def test_compaction_rewrites_small_files_and_keeps_the_batch_bookkeeping(
    output: IcebergOutput, tables: IcebergTables
) -> None:
    for batch_id in range(4):
        tables.commit("logs", logs_rows(batch_id), batch(batch_id))
    logs = tables.load("logs")
    before = sorted(logs.scan().to_arrow().column("message").to_pylist())
    files_before = len(list(logs.scan().plan_files()))

    done = compact(logs, "logs", 1 << 20)

    logs = tables.load("logs")
    assert done.files_before == files_before > done.files_after
    assert done.partitions == done.files_after == len(list(logs.scan().plan_files()))
    assert sorted(logs.scan().to_arrow().column("message").to_pylist()) == before
    assert held_batch(logs, "query-1") == 3
    # The replay of a batch the table held before the compaction is still skipped.
    assert not tables.commit("logs", logs_rows(3), batch(3))
    assert compact(logs, "logs", 1 << 20).partitions == 0

    expired = expire(logs, datetime.now(UTC) + timedelta(seconds=1))

    logs = tables.load("logs")
    assert expired.snapshots >= 4
    assert len(logs.snapshots()) == 1
    # Only the compacted files are left on disk.
    live = {task.file.file_path for task in logs.scan().plan_files()}
    on_disk = {f"file://{path}" for path in output.warehouse.rglob("*.parquet")}
    assert on_disk == live
    assert expired.files_deleted >= files_before
    assert held_batch(logs, "query-1") == 3
    assert sorted(logs.scan().to_arrow().column("message").to_pylist()) == before


def test_maintain_command(
    output: IcebergOutput, tables: IcebergTables, capsys: pytest.CaptureFixture[str]
) -> None:
    for batch_id in range(3):
        rows = {"logs": logs_rows(batch_id), "templates": templates_rows(batch_id + 1)}
        tables.commit_batch(batch(batch_id), rows)

    code = main(["pipeline", "iceberg", "maintain", "--warehouse", str(output.warehouse),
                 "--expire-older-than", "0s", "--target-file-size", "1m"])  # fmt: skip

    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["catalog"] == f"sqlite:///{output.warehouse / 'catalog.db'}"
    logs = report["tables"]["logs"]
    assert logs["files_before"] > logs["files_after"] > 0
    assert logs["snapshots_expired"] >= 3
    assert report["tables"]["templates"]["snapshots_expired"] >= 3
    assert logs["files_deleted"] >= logs["files_before"]
    assert tables.load("logs").scan().count() == 12
    assert tables.load("templates").scan().count() == 3
    assert held_batch(tables.load("logs"), "query-1") == 2


def test_each_data_file_holds_the_rows_of_its_partition(tables: IcebergTables) -> None:
    rows = pa.concat_tables([logs_rows(batch_id, lines=7) for batch_id in range(3)])
    tables.commit("logs", rows, batch(0))
    logs = tables.load("logs")
    partitions = set()
    for task in logs.scan().plan_files():
        source, day = task.file.partition[0], task.file.partition[1]
        partitions.add((source, day))
        written = pq.read_table(task.file.file_path.removeprefix("file://"))
        assert set(written.column("source").to_pylist()) == {source}
        stamps = written.column("timestamp").to_pylist()
        if day is None:
            assert stamps == [None] * len(stamps)
        else:
            assert {(stamp - datetime(1970, 1, 1, tzinfo=UTC)).days for stamp in stamps} == {day}
    assert partitions == {("apache", 0), ("apache", 1), ("apache", None), ("hdfs", 0), ("hdfs", 1)}
    assert logs.scan().count() == 21
