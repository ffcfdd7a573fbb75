"""The log ETL's Iceberg tables with their SQL catalog on a real PostgreSQL server: batch commits
and their replays, and the maintenance command, against the same catalog."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]
import pytest
from consumer_postgres import PostgresServer

from weir.cli.main import main
from weir.pipeline.iceberg_tables import BatchIdentity, IcebergOutput, IcebergTables, held_batch


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    yield server
    server.stop()


def logs_rows(batch_id: int) -> pa.Table:
    return pa.table({
        "timestamp": pa.array([batch_id * 3_600_000_000, None], pa.timestamp("us", tz="UTC")),
        "message": [f"batch {batch_id} a", f"batch {batch_id} b"],
        "source": ["hdfs", "apache"],
    })  # fmt: skip


def test_tables_in_a_postgresql_catalog(
    postgres: PostgresServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import psycopg

    uri = postgres.url.replace("postgresql://", "postgresql+psycopg://")
    output = IcebergOutput(warehouse=tmp_path / "warehouse", catalog_uri=uri, namespace="logs_etl")
    with IcebergTables(output) as tables:
        for batch_id in range(3):
            batch = BatchIdentity("query", batch_id, {"raw": {"0": batch_id + 1}})
            assert tables.commit_batch(batch, {"logs": logs_rows(batch_id)}) == ["logs"]
            assert tables.commit_batch(batch, {"logs": logs_rows(batch_id)}) == []

    # A new catalog connection: the tables are the server's.
    with IcebergTables(output) as tables:
        reopened = tables.load("logs")
    assert reopened.scan().count() == 6
    assert held_batch(reopened, "query") == 2
    with psycopg.connect(postgres.url) as connection:
        listed = connection.execute(
            "SELECT table_namespace, table_name FROM iceberg_tables"
        ).fetchall()
    assert listed == [("logs_etl", "logs")]

    code = main(["pipeline", "iceberg", "maintain", "--warehouse", str(output.warehouse),
                 "--catalog-uri", uri, "--namespace", "logs_etl",
                 "--expire-older-than", "0s"])  # fmt: skip

    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["tables"]["logs"]["files_after"] < report["tables"]["logs"]["files_before"]
    with IcebergTables(output) as tables:
        compacted = tables.load("logs")
    assert compacted.scan().count() == 6
    assert held_batch(compacted, "query") == 2
    assert len(compacted.snapshots()) == 1
