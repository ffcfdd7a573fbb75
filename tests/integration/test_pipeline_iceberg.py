"""The log ETL writing Iceberg tables (`--output iceberg`) against a real broker and Spark: read
back by pyiceberg, DuckDB and Spark; exactly once across kill -9 of the driver, twice."""

from __future__ import annotations

import itertools
import json
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess
from pipeline_spark import (
    LineFeeder,
    LogsJobProcess,
    create_topic,
    demo_lines,
    local_session,
    produce,
    run_logs_job_command,
)

from weir.pipeline.iceberg_tables import (
    BATCH_ID,
    OFFSETS,
    QUERY_ID,
    IcebergOutput,
    IcebergTables,
    ancestors,
)

pytestmark = pytest.mark.slow
KILL_ATTEMPTS = 5


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    yield from local_session()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("pipeline-iceberg") / "broker")
    process.start()
    yield process
    if process.process is not None:
        process.stop()


def topic_values(spark: Any, bootstrap: str, topic: str) -> dict[tuple[int, int], bytes]:
    """Every record's value in ``topic`` by (partition, offset), read with format("weir")."""
    rows = (
        spark.read.format("weir").option("bootstrap.servers", bootstrap)
        .option("subscribe", topic).load().select("partition", "offset", "value").collect()
    )  # fmt: skip
    return {(r["partition"], r["offset"]): bytes(r["value"]) for r in rows}


def load(output: IcebergOutput, name: str) -> Any:
    """One of the tables, loaded from the catalog (whose connections are then closed)."""
    with IcebergTables(output) as tables:
        return tables.load(name)


def landed(output: IcebergOutput) -> list[dict[str, Any]]:
    """The (partition, offset, text) of every row of logs and quarantine, read by pyiceberg:
    a logs row's message, a quarantined row's line."""
    rows = []
    for table, text in (("logs", "message"), ("quarantine", "line")):
        scanned = load(output, table).scan(selected_fields=("partition", "offset", text)).to_arrow()
        rows += [{"partition": r["partition"], "offset": r["offset"], "text": r[text]}
                 for r in scanned.to_pylist()]  # fmt: skip
    return rows


def checksum(rows: list[tuple[int, int, str]]) -> int:
    """An order-free checksum of rows: the sum of each row's CRC-32."""
    return sum(zlib.crc32(repr(row).encode()) for row in rows) & 0xFFFFFFFFFFFF


def duckdb_rows(output: IcebergOutput) -> list[tuple[int, int, str]]:
    """The same rows as ``landed``, counted and read by DuckDB over pyiceberg's scans."""
    connection = load(output, "logs").scan().to_duckdb("logs")
    load(output, "quarantine").scan().to_duckdb("quarantine", connection=connection)
    rows: list[tuple[int, int, str]] = connection.execute(
        'SELECT partition, "offset", message FROM logs '
        'UNION ALL SELECT partition, "offset", line FROM quarantine'
    ).fetchall()
    return rows


def batch_snapshots(output: IcebergOutput, table: str) -> list[dict[str, str]]:
    """The batch properties of the table's snapshots, oldest first."""
    loaded = load(output, table)
    found = []
    for snapshot in ancestors(loaded):
        properties = snapshot.summary.additional_properties
        if QUERY_ID in properties:
            found.append({"operation": snapshot.summary.operation.value, **properties})
    return found[::-1]


def test_logs_etl_to_iceberg_read_by_pyiceberg_duckdb_and_spark(
    spark: Any, shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "icelines", 2)
    lines = demo_lines()
    records = [{"key": s.encode(), "value": line.encode()}
               for s, ls in lines.items() for line in ls[:300]]  # fmt: skip
    records += [{"key": b"hdfs", "value": b"not an hdfs line"}]
    placed = produce(bootstrap, "icelines", records)
    warehouse, checkpoint = tmp_path / "warehouse", tmp_path / "checkpoint"

    report = run_logs_job_command([
        "--topic", "icelines", "--warehouse", str(warehouse), "--checkpoint", str(checkpoint),
        "--bootstrap-server", bootstrap, "--once", "--master", "local[2]",
        "--max-records-per-trigger", "1000", "--output", "iceberg",
    ])  # fmt: skip

    assert report["output"] == "iceberg" and report["records"] == len(records)
    assert report["batches"] >= 2
    output = IcebergOutput(warehouse=warehouse)
    assert (warehouse / "catalog.db").exists()
    rows = landed(output)
    positions = [(r["partition"], r["offset"]) for r in rows]
    assert sorted(positions) == sorted(placed)
    values = topic_values(spark, bootstrap, "icelines")
    assert all(r["text"] in values[r["partition"], r["offset"]].decode() for r in rows)
    # DuckDB reads what pyiceberg reads.
    seen_by_duckdb = duckdb_rows(output)
    assert len(seen_by_duckdb) == len(records)
    assert checksum(seen_by_duckdb) == checksum(
        [(r["partition"], r["offset"], r["text"]) for r in rows]
    )
    # Spark reads the data files of the current snapshot (without Iceberg's runtime).
    logs = load(output, "logs")
    files = [task.file.file_path for task in logs.scan().plan_files()]
    by_spark = spark.read.parquet(*files)
    per_source = Counter(
        {r["source"]: r["count"] for r in by_spark.groupBy("source").count().collect()}
    )
    assert per_source == Counter({s: len(ls[:300]) for s, ls in lines.items()})
    assert [field.name for field in logs.spec().fields] == ["source", "timestamp_day"]
    assert all("/source=" in path and "/timestamp_day=" in path for path in files)
    # One snapshot per batch per table, each naming its batch and the offsets it ends at.
    snapshots = batch_snapshots(output, "metrics_minute")
    assert [int(s[BATCH_ID]) for s in snapshots] == list(range(report["batches"]))
    ends = json.loads(snapshots[-1][OFFSETS])["icelines"]
    assert {int(p): end for p, end in ends.items()} == {
        p: max(o for q, o in placed if q == p) + 1 for p in {p for p, _ in placed}
    }
    templates = load(output, "templates").scan().to_arrow()
    assert templates.num_rows > 0
    assert len(set(templates.column("id").to_pylist())) == templates.num_rows


def mid_commit(job: LogsJobProcess, output: IcebergOutput) -> bool:
    """Whether the logs table holds a batch whose marker is not written yet: the job is
    between its tables' commits."""
    if not (output.warehouse / "catalog.db").exists():
        return False
    with IcebergTables(output) as tables:
        if "logs" not in tables.existing():
            return False
    held = batch_snapshots(output, "logs")
    committed = {marker["batch"] for marker in job.committed()}
    return bool(held) and int(held[-1][BATCH_ID]) not in committed


def kill_between_commits(job: LogsJobProcess, output: IcebergOutput) -> None:
    """Kills the job (kill -9) while the logs table holds a batch whose marker is not written,
    and starts it again. The moment is caught by polling; when the marker won the race, the
    job is started and killed again."""
    for _attempt in range(KILL_ATTEMPTS):
        job.wait_for(lambda: mid_commit(job, output), "a batch half committed")
        job.kill()
        landed = mid_commit(job, output)
        job.start()
        if landed:
            return
    pytest.fail(f"no kill in {KILL_ATTEMPTS} landed between two tables' commits")


def test_logs_to_iceberg_exactly_once_across_two_kill_9(
    spark: Any, shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "icekilled", 2)
    feeder = LineFeeder(bootstrap, "icekilled")
    job = LogsJobProcess(bootstrap, "icekilled", tmp_path, "--output", "iceberg")
    output = IcebergOutput(warehouse=job.warehouse)
    try:
        feeder.start()
        job.start()
        # Each kill lands between the logs table's commit and the batch's marker.
        for _kill in range(2):
            kill_between_commits(job, output)
            before = len(job.committed())
            job.wait_for(lambda n=before: len(job.committed()) > n, "a batch after the restart")
        placed = set(feeder.stop())
        job.wait_for(
            lambda: sum(m["records"] for m in job.committed()) >= len(placed), "catching up"
        )
        assert job.terminate() == 0, job.output()
    finally:
        feeder.stop()
        job.close()

    rows = landed(output)
    positions = [(r["partition"], r["offset"]) for r in rows]
    assert len(positions) == len(set(positions)), "some lines are in the tables twice"
    assert set(positions) == placed
    values = topic_values(spark, bootstrap, "icekilled")
    assert all(r["text"] in values[r["partition"], r["offset"]].decode() for r in rows)
    expected = checksum([(r["partition"], r["offset"], r["text"]) for r in rows])
    seen_by_duckdb = duckdb_rows(output)
    assert len(seen_by_duckdb) == len(placed)
    assert checksum(seen_by_duckdb) == expected
    # Each table holds each batch once, its snapshots naming the batches in order and the
    # offsets growing; the last one ends where the topic does.
    for table in ("logs", "quarantine", "metrics_minute", "templates"):
        snapshots = [s for s in batch_snapshots(output, table) if s["operation"] != "delete"]
        batches = [int(s[BATCH_ID]) for s in snapshots]
        assert batches == sorted(set(batches)), (table, batches)
    metrics = batch_snapshots(output, "metrics_minute")
    assert [int(s[BATCH_ID]) for s in metrics] == sorted(m["batch"] for m in job.committed())
    ends = [json.loads(s[OFFSETS])["icekilled"] for s in metrics]
    assert all(int(a[p]) <= int(b[p]) for a, b in itertools.pairwise(ends) for p in b if p in a)
    final = {int(p): end for p, end in ends[-1].items()}
    assert final == {p: max(o for q, o in placed if q == p) + 1 for p in {p for p, _ in placed}}
    metrics_rows = load(output, "metrics_minute").scan().to_arrow()
    logs_count = load(output, "logs").scan().count()
    assert sum(metrics_rows.column("lines").to_pylist()) == logs_count
    # Template ids survive the restarts: one id per message throughout.
    stamped = (
        load(output, "logs")
        .scan(selected_fields=("source", "message", "template_id"))
        .to_arrow()
        .to_pylist()
    )
    assert all(r["template_id"] is not None for r in stamped)
    ids_of_message: dict[tuple[str, str], set[int]] = {}
    for r in stamped:
        ids_of_message.setdefault((r["source"], r["message"]), set()).add(r["template_id"])
    assert all(len(ids) == 1 for ids in ids_of_message.values())
