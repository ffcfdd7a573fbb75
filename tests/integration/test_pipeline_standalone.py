"""The log ETL job on a Spark standalone cluster: a master and a worker started from the pyspark
installation, `weir pipeline logs --once --master spark://...` against a real broker."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.dataset as ds  # type: ignore[import-untyped]
import pytest
from broker_process import BrokerProcess
from pipeline_spark import StandaloneCluster, create_topic, demo_lines, produce, require_spark

pytestmark = pytest.mark.slow

APP_NAME = "weir pipeline logs"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[StandaloneCluster]:
    require_spark()
    root = tmp_path / "spark"
    root.mkdir()
    started = StandaloneCluster(root, cores=1, memory="1g")
    try:
        started.start()
        yield started
    finally:
        started.stop()


def landed(table: Path) -> list[tuple[str, int, int]]:
    """(topic, partition, offset) of every row of a warehouse table."""
    columns = ds.dataset(table, format="parquet", partitioning="hive").to_table(
        columns=["topic", "partition", "offset"]
    )
    return list(
        zip(
            columns.column("topic").to_pylist(),
            columns.column("partition").to_pylist(),
            columns.column("offset").to_pylist(),
            strict=True,
        )
    )


def test_logs_etl_on_a_standalone_cluster(
    cluster: StandaloneCluster, broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "loglines", 2)
    records = [
        {"key": source.encode(), "value": line.encode()}
        for source, lines in demo_lines().items()
        for line in lines
    ]
    records.append({"key": b"hdfs", "value": b"not an hdfs line"})
    placed = {("loglines", p, o) for p, o in produce(bootstrap, "loglines", records)}
    warehouse = tmp_path / "warehouse"
    command = [
        sys.executable, "-m", "weir.cli.main", "pipeline", "logs", "--topic", "loglines",
        "--warehouse", str(warehouse), "--checkpoint", str(tmp_path / "checkpoint"),
        "--bootstrap-server", bootstrap, "--once", "--master", cluster.master_url,
    ]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=480, env=cluster.env, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])

    rows = landed(warehouse / "logs") + landed(warehouse / "quarantine")
    assert len(rows) == len(set(rows)), "some lines are in the warehouse twice"
    assert set(rows) == placed
    assert report["records"] == len(records)
    assert report["logs"] + report["quarantined"] == len(records)
    assert report["quarantined"] >= 1

    cluster.wait_for(
        lambda: any(app["name"] == APP_NAME for app in cluster.status()["completedapps"]),
        "the application to be listed as completed",
    )
    (app,) = [a for a in cluster.status()["completedapps"] if a["name"] == APP_NAME]
    assert app["state"] == "FINISHED"
    executors = list(cluster.work_dir.glob(f"{app['id']}/*"))
    assert executors, f"no executor of {app['id']} ran on the worker"
