"""Helpers for the Spark pipeline tests: one local SparkSession, demo lines, topics."""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from broker_process import IN_CI
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from waiting import poll

DEMO_DATA = Path(__file__).resolve().parents[2] / "src" / "weir" / "cli" / "demo_data"


def require_spark() -> None:
    """Skips without Java or pyspark locally; fails without them in CI."""
    missing = None
    if shutil.which("java") is None:
        missing = "java is not installed"
    else:
        try:
            import pyspark  # noqa: F401
        except ImportError:
            missing = "pyspark is not installed"
    if missing is not None:
        if IN_CI:
            pytest.fail(f"{missing} (the Spark pipeline tests need it)")
        pytest.skip(missing)


def local_session() -> Iterator[Any]:
    require_spark()
    from weir.pipeline.session import weir_session

    spark = weir_session(
        master="local[2]",
        app_name="weir pipeline tests",
        config={
            "spark.driver.memory": "1g",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    yield spark
    spark.stop()


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)


def produce(bootstrap: str, topic: str, records: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """Produces ``records`` (keyword arguments of Producer.produce) and returns their
    (partition, offset) in order."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    placed: dict[int, tuple[int, int]] = {}

    def delivered(index: int) -> Any:
        def report(error: Any, message: Any) -> None:
            assert error is None, error
            placed[index] = (message.partition(), message.offset())

        return report

    for i, record in enumerate(records):
        producer.produce(topic, on_delivery=delivered(i), **record)
        producer.poll(0)
    assert producer.flush(30) == 0
    return [placed[i] for i in range(len(records))]


def demo_lines() -> dict[str, list[str]]:
    """The shipped loghub samples: source name -> lines."""
    lines: dict[str, list[str]] = {}
    for path in sorted(DEMO_DATA.glob("*.log.gz")):
        source = path.name.split("_", 1)[0].lower()
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as text:
            lines[source] = text.read().splitlines()
    return lines


def stream(spark: Any, bootstrap: str, **options: str) -> Any:
    """``spark.readStream.format("weir")`` with ``options``."""
    reader = spark.readStream.format("weir").option("bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


class BatchCollector:
    """A foreachBatch function that keeps each micro-batch's (partition, offset, value) rows."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[int, int, bytes]]] = []

    def __call__(self, frame: Any, batch_id: int) -> None:
        rows = frame.select("partition", "offset", "value").collect()
        self.batches.append([(r["partition"], r["offset"], bytes(r["value"])) for r in rows])

    def rows(self) -> list[tuple[int, int, bytes]]:
        return [row for batch in self.batches for row in batch]


def delete_records(bootstrap: str, topic: str, partition: int, before: int) -> None:
    """Moves the partition's log start offset up to ``before`` (DeleteRecords)."""
    from confluent_kafka import TopicPartition

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, partition, before)]).values():
        future.result(30)


class LineFeeder:
    """Produces demo lines (key = source) in chunks from a thread until stopped, recording
    where each landed. The sources take turns, line by line, so that every stretch of the
    topic holds lines of every source (and messages of each recur in every micro-batch)."""

    def __init__(self, bootstrap: str, topic: str, *, chunk: int = 200) -> None:
        by_source = [[(source, line) for line in texts] for source, texts in demo_lines().items()]
        self.records = [
            {"key": source.encode(), "value": line.encode()}
            for turn in itertools.zip_longest(*by_source)
            for source, line in filter(None, turn)
        ]
        self.bootstrap, self.topic, self.chunk = bootstrap, topic, chunk
        self.placed: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="line-feeder", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> list[tuple[int, int]]:
        self._stop.set()
        self._thread.join(120)
        assert not self._thread.is_alive(), "the feeder did not stop"
        return self.placed

    def _run(self) -> None:
        position = 0
        while not self._stop.is_set():
            batch = [self.records[(position + i) % len(self.records)] for i in range(self.chunk)]
            self.placed += produce(self.bootstrap, self.topic, batch)
            position += self.chunk
            self._stop.wait(0.5)


class LogsJobProcess:
    """``weir pipeline logs`` (streaming, no --once) as a child process in its own session, so
    that ``kill`` reaches the driver's JVM too. ``options``: more of its flags."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        root: Path,
        *options: str,
        max_records_per_trigger: int = 4000,
    ) -> None:
        self.warehouse, self.checkpoint = root / "warehouse", root / "checkpoint"
        self.command = [
            sys.executable, "-m", "weir.cli.main", "pipeline", "logs", "--topic", topic,
            "--warehouse", str(self.warehouse), "--checkpoint", str(self.checkpoint),
            "--bootstrap-server", bootstrap, "--master", "local[2]",
            "--max-records-per-trigger", str(max_records_per_trigger), *options,
        ]  # fmt: skip
        self.root = root
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.runs = 0

    def start(self) -> None:
        self.runs += 1
        self._log = (self.root / f"job-{self.runs}.log").open("wb")
        self.process = subprocess.Popen(
            self.command, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def kill(self) -> None:
        assert self.process is not None and self.process.poll() is None, self.output()
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(60)
        self._close_log()

    def terminate(self) -> int:
        assert self.process is not None and self.process.poll() is None, self.output()
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(300)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self._close_log()
        return code

    def committed(self) -> list[dict[str, Any]]:
        """The markers of the batches committed to the warehouse so far."""
        markers = self.warehouse.glob("_batches/*/*")
        return [json.loads(m.read_text()) for m in markers if m.name.isdigit()]

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_for(self, condition: Any, what: str, timeout: float = 600) -> None:
        """Wait for `condition`, failing early if the job exits."""

        def reached() -> bool:
            if condition():
                return True
            assert self.process is not None and self.process.poll() is None, self.output()
            return False

        poll(reached, timeout, what, interval=0.5)

    def close(self) -> None:
        """Kills the job if it still runs (after a failed test)."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(60)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def output(self) -> str:
        return (self.root / f"job-{self.runs}.log").read_text(errors="replace")[-4000:]


def run_logs_job_command(arguments: list[str]) -> dict[str, Any]:
    """Runs ``weir pipeline logs`` with ``arguments`` to its end; returns its JSON report."""
    command = [sys.executable, "-m", "weir.cli.main", "pipeline", "logs", *arguments]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=300, env={**os.environ}, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def warehouse_rows(warehouse: Path, table: str, columns: list[str]) -> list[dict[str, Any]]:
    """The rows of one of the warehouse's tables (its Parquet files, read with pyarrow; the
    partition directories give their columns, Hive's null name read as null)."""
    import pyarrow.dataset as ds  # type: ignore[import-untyped]

    directory = warehouse / table
    if not directory.exists():
        return []
    partitioning = ds.HivePartitioning.discover(null_fallback="__HIVE_DEFAULT_PARTITION__")
    dataset = ds.dataset(str(directory), format="parquet", partitioning=partitioning)
    rows: list[dict[str, Any]] = dataset.to_table(columns=columns).to_pylist()
    return rows


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class StandaloneCluster:
    """A Spark standalone master and one worker, started with ``bin/spark-class`` from the
    pyspark installation, each in its own process group (the worker's executors and their
    Python workers included), bound to 127.0.0.1."""

    def __init__(self, root: Path, *, cores: int = 1, memory: str = "1g") -> None:
        from pyspark.find_spark_home import _find_spark_home

        self.spark_home = Path(_find_spark_home())
        self.root = root
        self.work_dir = root / "work"
        self.port, self.ui_port, self.worker_ui_port = free_port(), free_port(), free_port()
        self.cores, self.memory = cores, memory
        self.env = {**os.environ, "SPARK_HOME": str(self.spark_home),
                    "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(root / "logs"),
                    "PYSPARK_PYTHON": sys.executable}  # fmt: skip
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def start(self, timeout: float = 180) -> None:
        spark_class = str(self.spark_home / "bin" / "spark-class")
        self._spawn("master", [spark_class, "org.apache.spark.deploy.master.Master",
                               "--host", "127.0.0.1", "--port", str(self.port),
                               "--webui-port", str(self.ui_port)])  # fmt: skip
        self.wait_for(lambda: self.status() is not None, "the master's web UI", timeout)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._spawn("worker", [spark_class, "org.apache.spark.deploy.worker.Worker",
                               self.master_url, "--host", "127.0.0.1",
                               "--cores", str(self.cores), "--memory", self.memory,
                               "--webui-port", str(self.worker_ui_port),
                               "--work-dir", str(self.work_dir)])  # fmt: skip
        self.wait_for(
            lambda: (self.status() or {}).get("aliveworkers", 0) >= 1,
            "the worker to register",
            timeout,
        )

    def status(self) -> dict[str, Any] | None:
        """The master's JSON status page, or None while it does not answer."""
        url = f"http://127.0.0.1:{self.ui_port}/json/"
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                document: dict[str, Any] = json.load(answer)
                return document
        except (OSError, ValueError):
            return None

    def wait_for(self, condition: Any, what: str, timeout: float = 180) -> None:
        """Wait for `condition`, failing early if a process of the cluster exits."""

        def reached() -> bool:
            if condition():
                return True
            for name, process in self.processes.items():
                assert process.poll() is None, f"the {name} exited:\n{self.output(name)}"
            return False

        poll(reached, timeout, what, interval=0.5)

    def output(self, name: str) -> str:
        return (self.root / f"{name}.log").read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        """Kills the worker (with its executors) and the master."""
        for name in ("worker", "master"):
            process = self.processes.pop(name, None)
            if process is None:
                continue
            for pid in session_members(process.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            process.wait(60)

    def _spawn(self, name: str, command: list[str]) -> None:
        with (self.root / f"{name}.log").open("wb") as log:
            self.processes[name] = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                cwd=self.root, start_new_session=True,
            )  # fmt: skip


def session_members(session: int) -> list[int]:
    """The processes of a session (a child started with ``start_new_session``), the leader
    first: also those that moved to process groups of their own within it."""
    members = [session]
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            pid = int(stat.parent.name)
            if int(fields[3]) == session and pid != session:
                members.append(pid)
    return members
