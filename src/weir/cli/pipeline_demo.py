"""`weir demo`: the main job end to end on real logs shipped with weir.

Starts a single-node broker (embedded metadata) as a child process, produces the Loghub samples
into a topic (key = the source system), runs the log ETL job on Spark (`local[*]`) as a stream
with an available-now trigger to a Parquet warehouse, prints rows per source and level, the
quarantined lines and where the tables are, and stops what it started. Everything lives in a
temporary directory unless `data_dir` is given. While the ETL runs it reports how many records
it has read (the stream takes the backlog in a few micro-batches, so there is progress to see).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from weir.cli.demo import load_samples
from weir.cli.etl_progress import offsets_read
from weir.cli.table import print_table

TOPIC = "logs.raw"
PARTITIONS = 3
#: the backlog is read in about this many micro-batches
ETL_BATCHES = 4
#: how often the ETL's progress is looked at
PROGRESS_INTERVAL_S = 1.0


def run_pipeline_demo(data_dir: Path | None) -> int:
    if data_dir is not None:
        data_dir.mkdir(parents=True, exist_ok=True)
        return _run_in(data_dir, keep=True)
    with tempfile.TemporaryDirectory(prefix="weir-demo-") as scratch:
        return _run_in(Path(scratch), keep=False)


def _run_in(root: Path, *, keep: bool) -> int:
    samples = load_samples()
    total = sum(len(lines) for lines in samples.values())
    print(f"weir demo: {total:,} real log lines from {len(samples)} systems "
          f"-> weir broker -> Spark ETL -> Parquet\n")  # fmt: skip
    broker, bootstrap = _start_broker(root / "broker")
    try:
        print(f"broker ready on {bootstrap}")
        _produce(bootstrap, samples)
        print(f"produced {total:,} lines to topic {TOPIC!r} ({PARTITIONS} partitions)")
        return _etl_and_report(bootstrap, root, total)
    finally:
        broker.send_signal(signal.SIGTERM)
        broker.wait(30)
        print(f"broker stopped; data in {root}{_removed_note(keep)}")


def _start_broker(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    ready = data_dir.parent / "broker.ready"
    ready.unlink(missing_ok=True)
    command = [sys.executable, "-m", "weir.cli.main", "broker", "start", "--data-dir",
               str(data_dir), "--listen", "127.0.0.1:0", "--ready-file", str(ready)]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not (ready.exists() and ready.read_text().strip()):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise SystemExit("weir: the demo broker did not start")
        time.sleep(0.05)
    return process, ready.read_text().strip()


def _produce(bootstrap: str, samples: dict[str, list[bytes]]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    futures = admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS)])
    futures[TOPIC].result(30)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "compression.type": "lz4",
            "linger.ms": 20,
            "log_level": 0,
        }
    )
    for source, lines in samples.items():
        for line in lines:
            producer.produce(TOPIC, key=source.encode(), value=line)
            producer.poll(0)
    if producer.flush(60):
        raise SystemExit("weir: the demo could not deliver every line")


def _etl_and_report(bootstrap: str, root: Path, total: int) -> int:
    from weir.pipeline.logs_job import SPARK_CONFIG, LogsJob, run_logs_job
    from weir.pipeline.session import weir_session

    warehouse = root / "warehouse"
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = weir_session(master="local[*]", app_name="weir demo",
                         config={**SPARK_CONFIG, "spark.driver.memory": "1g"})  # fmt: skip
    spark.sparkContext.setLogLevel("ERROR")
    try:
        started = time.monotonic()
        job = LogsJob(bootstrap=bootstrap, topic=TOPIC, warehouse=warehouse,
                      checkpoint=root / "checkpoint", once=True,
                      max_records_per_trigger=max(total // ETL_BATCHES, 1))  # fmt: skip
        summary = _with_progress(spark, lambda: run_logs_job(spark, job), total, started)
        seconds = time.monotonic() - started
        print(
            f"ETL: {summary.records:,} records -> {summary.logs:,} parsed rows, "
            f"{summary.quarantined:,} quarantined, in {seconds:.1f} s\n"
        )
        _print_levels(spark, warehouse)
        quarantined = spark.read.parquet(str(warehouse / "quarantine"))
        reasons = quarantined.groupBy("reason").count().orderBy("reason").collect()
        print(
            "quarantined: "
            + (
                ", ".join(f"{r['reason']} {r['count']}" for r in reasons)
                or "none (every line parsed)"
            )
        )
        minutes = spark.read.parquet(str(warehouse / "metrics_minute")).count()
        topic = job.metrics_topic_name
        print(f"metrics_minute rows: {minutes:,} (also as JSON in topic {topic!r})")
    finally:
        spark.stop()
    print(
        f"\nwarehouse: {warehouse}/{{logs,quarantine,metrics_minute}} "
        f"(spark.read.parquet('{warehouse}/logs'))"
    )
    return 0 if summary.records == total else 1


def _with_progress(spark: Any, run: Any, total: int, started: float) -> Any:
    """`run()` on a thread of its own; meanwhile, each time the stream has read more, a line
    with the records read so far (the end offsets of the query's last progress report: the
    topic's offsets start at 0)."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = run()
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="weir-demo-etl", daemon=True)
    thread.start()
    queries: dict[str, Any] = {}
    reported = 0
    while reported < total:
        running = thread.is_alive()
        thread.join(PROGRESS_INTERVAL_S)
        for query in spark.streams.active:
            queries.setdefault(query.id, query)
        read = sum(offsets_read(q.lastProgress) for q in queries.values())
        if read > reported:
            reported = read
            print(f"ETL: {read:,} of {total:,} records read ({read / total:.0%}) "
                  f"after {time.monotonic() - started:.0f} s", flush=True)  # fmt: skip
        if not running:
            break
    thread.join()  # every record read is not the job done: its last batch is still written
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def _print_levels(spark: object, warehouse: Path) -> None:
    logs = spark.read.parquet(str(warehouse / "logs"))  # type: ignore[attr-defined]
    rows = logs.groupBy("source", "level").count().orderBy("source", "level").collect()
    by_source: dict[str, list[str]] = {}
    for row in rows:
        level = row["level"] or "(no level in the format)"
        by_source.setdefault(row["source"], []).append(f"{level} {row['count']:,}")
    rows = [(source, ", ".join(levels)) for source, levels in sorted(by_source.items())]
    print_table(("source", "rows by level"), rows)


def _removed_note(keep: bool) -> str:
    return "" if keep else " (a temporary directory, removed now: pass --data-dir DIR to keep it)"
