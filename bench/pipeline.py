"""Spark pipeline benchmark: rows/s from a topic of raw log lines to the Parquet warehouse with the
log ETL job on local[2], beside the raw consume rate of the same topic with confluent-kafka and
the parse-only rate of the job's parser, in one run.

Starts `weir broker start` (single node) on an ephemeral port and produces --records real log
lines (the Loghub samples shipped in weir.cli.demo_data, cycled, each keyed by its source) into a
--partitions topic. Then:
- raw consume: one confluent-kafka consumer assigned to every partition from offset 0, a bare
  `consume(10000)` loop that counts (fetch.queue.backoff.ms=1 and the fetch sizes of the ETL's
  readers), timed from the first record to the last, each run in a new process: once before the
  first ETL run and once after each, the median of those runs;
- ETL: the job's query with `--once` semantics (an available-now trigger) on a local[2]
  session configured as `weir pipeline logs` configures it, into a fresh warehouse, once for each
  --trigger-records: ``all``, the job's default (no maxRecordsPerTrigger: one micro-batch takes
  everything there), or a number of records per micro-batch; timed from the start of the query
  to its end (the session's startup is reported apart), and, with several micro-batches, in
  steady state: the records of the micro-batches after the first over their durations (Spark's
  progress reports, whose phases each batch lists), the first one carrying the JVM's and the
  Python workers' warm-up. Each run is a new Python process with its own JVM. Each micro-batch
  also costs a fixed time (Spark's planning and commit between batches, each task's first
  fetch, files opened per directory, the two tasks finishing apart), so larger micro-batches
  run faster. The sessions' drivers map the class archive weir keeps for Spark's JVM
  (``weir.pipeline.jvm_classes``); when there is none yet, a short ETL run on a small topic
  writes it before anything is measured;
- parse only: `weir.pipeline.logs_job.parse_batches` over the same lines in Arrow batches of
  the size the job hands its parser, in this process, for reference; and again over the sample
  lines once each (``parse_only_samples_once``), where no line repeats except as the samples
  repeat themselves (the parser templates each distinct message of a batch once).

Beside the wall-clock rates, each ETL run reports the CPU seconds its query took in the job's
processes (``cpu_seconds``: the driver, its JVM, the Python workers and the processes they
reaped, read from /proc at the query's start and end) and in the broker (``broker_cpu_seconds``),
which depend far less than wall time on what else the machine runs.

With ``--baseline REF`` every ETL run is made twice, by this checkout's job and by the job of
commit REF (its ``src`` taken from git into a temporary directory and put on the driver's and
the Python workers' path; the job does not use the broker's compiled record walk), one after
the other against the same broker and topic, the order swapped from one repeat to the next. The
report gives each side's figures and the current job's rate over the baseline's
(``vs_baseline``). The broker, the bench and the raw consumes are this checkout's either way.
With ``--dedupe`` the records carry the agent's headers (``weir.agent``, ``weir.pos``: eight
simulated agents, each with its own positions in every partition), and after every hundredth
record one of the 64 before it is sent again, as a retrying client would (1% copies); every
ETL run is then made twice, with ``--dedupe`` and without, one after the other against the same
topic, the order swapped from one repeat to the next. The report gives the runs with dedupe
(``dedupe``) and their rate over those without (``dedupe_vs_no_dedupe``; below 1: what
deduplication costs). Not combined with ``--baseline``.
With ``--iceberg`` every ETL run of this checkout is made again with the job writing Iceberg
tables (``--output iceberg``: a SQLite catalog in the warehouse, one commit per table per
micro-batch), one after the other against the same topic, the order swapped from one repeat to
the next; with ``--baseline`` too, the baseline's Parquet runs are made in the same rounds. The
report gives the Iceberg runs (``iceberg``) and their rate and CPU per row over this checkout's
Parquet runs (``iceberg_vs_parquet``; below 1: what Iceberg output costs).
Writes JSON to bench/results/pipeline.json (or --out) and prints it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import weir
from broker import start_broker
from parsing import old_tree
from weir.pipeline.dedupe import AGENT, DedupeKey
from weir.pipeline.jvm_classes import MAP
from weir.pipeline.kafka_io import FETCH_BYTES, PARTITION_FETCH_BYTES, ensure_topic
from weir.pipeline.logs_job import (
    PARSE_BATCH_RECORDS,
    BatchWriter,
    LogsJob,
    checkpoint_query_id,
    parse_batches,
    start_query,
)
from weir.pipeline.logs_job import (
    SPARK_CONFIG as JOB_SPARK_CONFIG,
)
from weir.pipeline.session import class_archive_options, weir_session
from weir.pipeline.warehouse import BatchCommits
from weir.protocol.event_headers import AGENT_HEADER, POSITION_HEADER

TOPIC = "bench-loglines"
TARGET_ROWS_PER_S = 250_000
TARGET_VS_RAW = 0.5
ALL = "all"
WARM_UP_TOPIC = "bench-warm-up"
WARM_UP_RECORDS = 20_000
DEMO_DATA = Path(__file__).resolve().parents[1] / "src" / "weir" / "cli" / "demo_data"
TIMEOUT_S = 600
SPARK_CONFIG = {**JOB_SPARK_CONFIG, "spark.driver.memory": "1g"}
DEDUPE = "dedupe"  # the side of the runs with --dedupe
ICEBERG = "iceberg"  # the side of the runs with --output iceberg
AGENTS = 8  # simulated agents, with --dedupe
COPY_EVERY = 100  # with --dedupe: after every this many records, a copy of an earlier one
COPY_DISTANCE = 64  # how many records back the copied one is (at most)


def demo_records() -> list[tuple[bytes, bytes]]:
    """(source key, line) of every shipped sample line."""
    records = []
    for path in sorted(DEMO_DATA.glob("*.log.gz")):
        source = path.name.split("_", 1)[0].lower().encode()
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as text:
            records += [(source, line.encode()) for line in text.read().splitlines()]
    return records


def cycled(records: list[tuple[bytes, bytes]], count: int) -> list[tuple[bytes, bytes]]:
    return [records[n % len(records)] for n in range(count)]


def produce(
    bootstrap: str,
    records: list[tuple[bytes, bytes]],
    partitions: int,
    topic: str = TOPIC,
    *,
    agents: bool = False,
) -> float:
    """Produces the records round-robin over the partitions; returns the seconds it took. With
    ``agents``, each carries a simulated agent's headers, and copies follow (``copies``)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "1",
                         "batch.size": 1_000_000, "queue.buffering.max.messages": 2_000_000,
                         "log_level": 3})  # fmt: skip
    positions = [0] * (AGENTS * partitions)
    recent: deque[tuple[bytes, bytes, int, list[tuple[str, bytes]] | None]] = deque(
        maxlen=COPY_DISTANCE
    )
    started = time.perf_counter()
    for n, (key, value) in enumerate(records):
        partition = n % partitions
        headers = None
        if agents:
            writer = (n // partitions) % AGENTS * partitions + partition
            headers = [(AGENT_HEADER, f"agent-{writer // partitions}".encode()),
                       (POSITION_HEADER, str(positions[writer]).encode())]  # fmt: skip
            positions[writer] += 1
            recent.append((key, value, partition, headers))
        send(producer, topic, value, key, partition, headers)
        if agents and n % COPY_EVERY == COPY_EVERY - 1:
            copied_key, copied_value, copied_partition, copied_headers = recent[0]
            send(producer, topic, copied_value, copied_key, copied_partition, copied_headers)
    if producer.flush(120):
        raise RuntimeError("not every record was acknowledged")
    return time.perf_counter() - started


def send(
    producer: Producer,
    topic: str,
    value: bytes,
    key: bytes,
    partition: int,
    headers: list[tuple[str, bytes]] | None,
) -> None:
    while True:
        try:
            producer.produce(topic, value, key, partition=partition, headers=headers)
            return
        except BufferError:
            producer.poll(0.01)


def copies(records: int, agents: bool) -> int:
    """The copies ``produce`` sends after ``records`` records."""
    return records // COPY_EVERY if agents else 0


def raw_consume(bootstrap: str, expected: int, partitions: int) -> dict[str, Any]:
    # The fetch settings of the ETL's readers, so the baseline is tuned as they are.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-raw",
                         "enable.auto.commit": False, "fetch.queue.backoff.ms": 1,
                         "max.partition.fetch.bytes": PARTITION_FETCH_BYTES,
                         "fetch.max.bytes": FETCH_BYTES, "log_level": 3})  # fmt: skip
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
    seen = 0
    first = 0.0
    deadline = time.monotonic() + TIMEOUT_S
    while seen < expected and time.monotonic() < deadline:
        messages = consumer.consume(10_000, 0.1)
        if messages and not first:
            first = time.perf_counter()
        seen += len(messages)
    seconds = time.perf_counter() - first
    consumer.close()
    return {"records": seen, "seconds": round(seconds, 3), "records_per_s": round(seen / seconds)}


def in_new_process(function: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """``function(*args)`` in a new Python process: each ETL run starts its own JVM and Python
    workers, as a job does, instead of inheriting those that an earlier run warmed up; and the
    raw consumer runs beside nothing else, as Python's garbage collector would otherwise walk
    every object this process holds (its collections slowed a raw consume in a process that had
    imported pandas by about a fifth)."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(function, args)


def etl(
    bootstrap: str,
    scratch: Path,
    run: str,
    trigger_records: int | None,
    topic: str = TOPIC,
    dedupe: bool = False,
    iceberg: bool = False,
) -> dict[str, Any]:
    """One run of the job's query (available-now, ``trigger_records`` per micro-batch, or all in
    one; with ``dedupe``, deduplicating on the agent's headers; with ``iceberg``, writing Iceberg
    tables) on a new session: the whole run's rate, and the steady rate of the micro-batches
    after the first (whose time includes the JVM's and the Python workers' warm-up)."""
    started = time.perf_counter()
    spark = weir_session(master="local[2]", app_name="weir bench pipeline", config=SPARK_CONFIG)
    spark.sparkContext.setLogLevel("ERROR")
    startup = time.perf_counter() - started
    warehouse = scratch / f"warehouse-{run}"
    output: dict[str, Any] = {}
    if iceberg:
        # Imported here: a baseline's job may have no Iceberg output.
        from weir.pipeline.iceberg_tables import IcebergOutput

        output["iceberg"] = IcebergOutput(warehouse=warehouse)
    job = LogsJob(
        bootstrap=bootstrap,
        topic=topic,
        warehouse=warehouse,
        checkpoint=scratch / f"checkpoint-{run}",
        once=True,
        max_records_per_trigger=trigger_records,
        dedupe=DedupeKey.parse(AGENT) if dedupe else None,
        **output,
    )
    ensure_topic({"bootstrap.servers": bootstrap}, job.metrics_topic_name)
    writer = BatchWriter(job)
    try:
        cpu_before = tree_cpu_seconds(os.getpid())
        started = time.perf_counter()
        query = start_query(spark, job, writer)
        query.awaitTermination(TIMEOUT_S)
        seconds = time.perf_counter() - started
        cpu_seconds = tree_cpu_seconds(os.getpid()) - cpu_before
        progress = list(query.recentProgress)
        query.stop()
    finally:
        writer.close()
        spark.stop()
    summary = writer.summary
    markers = BatchCommits(job.warehouse, checkpoint_query_id(job))
    batches = [
        {
            "batch": p.batchId,
            "records": (markers.committed(p.batchId) or {}).get("records", 0),
            "seconds": round(p.durationMs["triggerExecution"] / 1000, 3),
            "phases_ms": dict(p.durationMs),
        }
        for p in progress
        if markers.committed(p.batchId) is not None
    ]
    later = batches[1:]
    steady_records = sum(b["records"] for b in later)
    steady_seconds = sum(b["seconds"] for b in later)
    return {
        "records": summary.records,
        "logs": summary.logs,
        "quarantined": summary.quarantined,
        "duplicates": summary.duplicates,
        "batches": batches,
        "seconds": round(seconds, 3),
        "rows_per_s": round(summary.records / seconds),
        "steady_rows_per_s": round(steady_records / steady_seconds) if steady_seconds else None,
        "session_startup_seconds": round(startup, 3),
        "cpu_seconds": round(cpu_seconds, 2),
        "cpu_us_per_row": round(cpu_seconds * 1e6 / max(summary.records, 1), 2),
    }


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds (user and system) of process ``root`` and its descendants, each with the
    children it has reaped, from /proc."""
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # ended meanwhile
        fields = text[text.rindex(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
        ticks[int(entry)] = sum(int(n) for n in fields[11:15])  # utime stime cutime cstime
    total, pending = 0, [root]
    while pending:
        pid = pending.pop()
        total += ticks.get(pid, 0)
        pending += children.get(pid, [])
    return total / os.sysconf("SC_CLK_TCK")


def etl_process(
    source: Path | None,
    bootstrap: str,
    scratch: Path,
    run: str,
    trigger_records: int | None,
    broker: int,
    dedupe: bool = False,
    iceberg: bool = False,
) -> dict[str, Any]:
    """``etl`` in a new Python process (see ``in_new_process``) that imports weir from
    ``source`` (a baseline's ``src``) if given, else as this process does; with the CPU
    seconds the broker (process ``broker``) spent meanwhile."""
    result = scratch / f"etl-{run}.json"
    command = [sys.executable, __file__, "--etl-worker", json.dumps(
        {"bootstrap": bootstrap, "scratch": str(scratch), "run": run,
         "trigger_records": trigger_records, "result": str(result), "dedupe": dedupe,
         "iceberg": iceberg})]  # fmt: skip
    environment = dict(os.environ)
    if source is not None:
        environment["PYTHONPATH"] = str(source)
    broker_before = tree_cpu_seconds(broker)
    subprocess.run(command, env=environment, check=True, timeout=TIMEOUT_S * 2)
    answer: dict[str, Any] = json.loads(result.read_text())
    answer["broker_cpu_seconds"] = round(tree_cpu_seconds(broker) - broker_before, 2)
    return answer


def etl_worker(arguments: str) -> int:
    """The body of ``etl_process``'s process: runs ``etl`` and writes its result as JSON."""
    given = json.loads(arguments)
    result = etl(given["bootstrap"], Path(given["scratch"]), given["run"], given["trigger_records"],
                 dedupe=given.get("dedupe", False),
                 iceberg=given.get("iceberg", False))  # fmt: skip
    result["weir"] = str(Path(weir.__file__).parent)
    Path(given["result"]).write_text(json.dumps(result))
    return 0


def class_archive(bootstrap: str, scratch: Path, samples: list[tuple[bytes, bytes]]) -> bool:
    """Makes sure the Spark driver's class archive exists (see ``weir.pipeline.jvm_classes``),
    as it does on a machine that ran the job before: if not, a short ETL run on a small topic
    writes it as its JVM exits. True if this run wrote it."""
    if MAP in (class_archive_options() or ""):
        return False
    produce(bootstrap, cycled(samples, WARM_UP_RECORDS), 2, WARM_UP_TOPIC)
    in_new_process(etl, bootstrap, scratch, "warm-up", None, WARM_UP_TOPIC)
    deadline = time.monotonic() + TIMEOUT_S
    while (options := class_archive_options()) is None and time.monotonic() < deadline:
        time.sleep(0.2)  # the warm-up's JVM is still writing it
    if options is None or MAP not in options:
        raise RuntimeError(f"no class archive after the warm-up run: {options}")
    return True


def etl_summary(trigger: int | None, runs: list[dict[str, Any]], raw_rate: float) -> dict[str, Any]:
    """The runs at one micro-batch size, their medians, and how they compare with the targets."""
    rate = statistics.median(r["rows_per_s"] for r in runs)
    steady = [r["steady_rows_per_s"] for r in runs if r["steady_rows_per_s"] is not None]
    steady_rate = statistics.median(steady) if steady else None
    return {
        "max_records_per_trigger": trigger,
        "rows_per_s": round(rate),
        "steady_rows_per_s": round(steady_rate) if steady_rate else None,
        "vs_raw_consume": round(rate / raw_rate, 3),
        "steady_vs_raw_consume": round(steady_rate / raw_rate, 3) if steady_rate else None,
        "targets_met": rate >= TARGET_ROWS_PER_S and rate >= raw_rate * TARGET_VS_RAW,
        "cpu_us_per_row": round(statistics.median(r["cpu_us_per_row"] for r in runs), 2),
        "broker_cpu_seconds": statistics.median(r["broker_cpu_seconds"] for r in runs),
        "targets_met_in_steady_state": steady_rate is not None
        and steady_rate >= TARGET_ROWS_PER_S
        and steady_rate >= raw_rate * TARGET_VS_RAW,
        "runs": runs,
    }


def parse_only(records: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    batches = []
    for begin in range(0, len(records), PARSE_BATCH_RECORDS):
        chunk = records[begin : begin + PARSE_BATCH_RECORDS]
        batches.append(
            pa.RecordBatch.from_pydict(
                {
                    "key": pa.array([k for k, _ in chunk], pa.binary()),
                    "value": pa.array([v for _, v in chunk], pa.binary()),
                    "topic": pa.array([TOPIC] * len(chunk), pa.string()),
                    "partition": pa.array([0] * len(chunk), pa.int32()),
                    "offset": pa.array(range(begin, begin + len(chunk)), pa.int64()),
                }
            )
        )
    started = time.perf_counter()
    rows = sum(batch.num_rows for batch in parse_batches(iter(batches)))
    seconds = time.perf_counter() - started
    return {"records": rows, "seconds": round(seconds, 3), "rows_per_s": round(rows / seconds)}


def trigger_size(text: str) -> int | None:
    """A --trigger-records value: ``all`` (no cap) or a positive number of records."""
    if text == ALL:
        return None
    records = int(text)
    if records <= 0:
        raise argparse.ArgumentTypeError(f"{text}: not a positive number of records")
    return records


def main() -> int:
    args = arguments()
    if args.etl_worker:
        return etl_worker(args.etl_worker)
    samples = demo_records()
    records = cycled(samples, args.records)
    with tempfile.TemporaryDirectory(prefix="weir-bench-") as scratch:
        process, bootstrap = start_broker(Path(scratch) / "data")
        try:
            produce_s = produce(bootstrap, records, args.partitions, agents=args.dedupe)
            # Live tuples would make every collection of Python's garbage collector in this
            # process (the raw consumer, then the ETL's driver) walk them.
            del records
            archive_written = class_archive(bootstrap, Path(scratch), samples)
            sides: dict[str, Path | None] = {"current": None}
            if args.baseline:
                sides["baseline"] = old_tree(args.baseline, Path(scratch) / "baseline")
            if args.dedupe:
                sides[DEDUPE] = None
            if args.iceberg:
                sides[ICEBERG] = None
            raw, etls = measure(bootstrap, Path(scratch), sides, args, process.pid)
        finally:
            process.terminate()
            process.wait(30)
    parse = parse_only(cycled(samples, args.parse_records))
    parse_distinct = parse_only(samples)
    raw_rate = statistics.median(r["records_per_s"] for r in raw)
    summaries = {
        side: [etl_summary(trigger, runs, raw_rate) for trigger, runs in by_trigger.items()]
        for side, by_trigger in etls.items()
    }
    report = {
        "benchmark": "pipeline",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_at_end": os.getloadavg(),
        },
        "settings": {
            "records": args.records,
            "copies": copies(args.records, args.dedupe),
            "partitions": args.partitions,
            "lines": f"{len(samples)} Loghub sample lines cycled, keyed by source"
            + (f", with the headers of {AGENTS} agents" if args.dedupe else ""),
            "mean_line_bytes": round(sum(len(v) for _, v in samples) / len(samples), 1),
            "raw_consume": (
                "one consumer, assign, consume(10000), fetch.queue.backoff.ms=1, "
                "max.partition.fetch.bytes and fetch.max.bytes as the ETL's readers"
            ),
            "etl": (
                "weir pipeline logs --once on local[2] (available-now), once per "
                "maxRecordsPerTrigger (null: no cap, the job's default); steady: the "
                "micro-batches after the first"
            ),
            "spark": SPARK_CONFIG,
            "parse_records": args.parse_records,
            "raw_consume_runs": len(raw),
            "etl_repeat": args.etl_repeat,
            "baseline": args.baseline,
            "iceberg": args.iceberg,
        },
        "produce_seconds": round(produce_s, 3),
        "class_archive": (
            "written by a warm-up run before the measured runs"
            if archive_written
            else "present before this run"
        ),
        "raw_consume": {"records_per_s": round(raw_rate), "runs": raw},
        "etl": summaries["current"],
        "parse_only": parse,
        "parse_only_samples_once": parse_distinct,
        "targets": {"etl_rows_per_s": TARGET_ROWS_PER_S, "etl_vs_raw_consume": TARGET_VS_RAW},
    }
    if args.baseline:
        report["baseline"] = {"commit": args.baseline, "etl": summaries["baseline"]}
        report["vs_baseline"] = versus(etls, "current", "baseline")
    if args.dedupe:
        report[DEDUPE] = {"etl": summaries[DEDUPE]}
        report["dedupe_vs_no_dedupe"] = versus(etls, DEDUPE, "current")
    if args.iceberg:
        report[ICEBERG] = {"etl": summaries[ICEBERG]}
        report["iceberg_vs_parquet"] = versus(etls, ICEBERG, "current")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


def measure(
    bootstrap: str,
    scratch: Path,
    sides: dict[str, Path | None],
    args: argparse.Namespace,
    broker: int,
) -> tuple[list[dict[str, Any]], dict[str, dict[int | None, list[dict[str, Any]]]]]:
    """The raw consumes and each side's ETL runs, by side and micro-batch size. The raw
    consumes run once first and then after each ETL run, so that both sample the machine alike:
    its speed drifts by a third and more over a run."""
    total = args.records + copies(args.records, args.dedupe)
    raw = [in_new_process(raw_consume, bootstrap, total, args.partitions)]
    etls: dict[str, dict[int | None, list[dict[str, Any]]]] = {
        side: {t: [] for t in args.trigger_records} for side in sides
    }
    for n in range(args.etl_repeat):
        for trigger in args.trigger_records:
            order = list(sides) if n % 2 == 0 else list(reversed(sides))
            for side in order:
                run = f"{side}-{trigger or ALL}-{n}"
                result = etl_process(sides[side], bootstrap, scratch, run, trigger, broker,
                                     dedupe=side == DEDUPE, iceberg=side == ICEBERG)  # fmt: skip
                etls[side][trigger].append(result)
                raw.append(in_new_process(raw_consume, bootstrap, total, args.partitions))
    return raw, etls


def versus(
    etls: dict[str, dict[int | None, list[dict[str, Any]]]], side: str, against: str
) -> list[dict[str, Any]]:
    """Per micro-batch size, the rate of ``side``'s runs over ``against``'s: of their medians,
    and of the runs made one after the other; and ``against``'s CPU seconds per row over
    ``side``'s (above 1: ``side`` takes less), of their medians."""
    compared = []
    for trigger, current in etls[side].items():
        baseline = etls[against][trigger]
        pairs = [c["rows_per_s"] / b["rows_per_s"] for c, b in zip(current, baseline, strict=True)]
        entry: dict[str, Any] = {
            "max_records_per_trigger": trigger,
            "rows_per_s": round(
                statistics.median(r["rows_per_s"] for r in current)
                / statistics.median(r["rows_per_s"] for r in baseline),
                3,
            ),
            "paired_runs": [round(ratio, 3) for ratio in pairs],
            "cpu_per_row": round(
                statistics.median(r["cpu_us_per_row"] for r in baseline)
                / statistics.median(r["cpu_us_per_row"] for r in current),
                3,
            ),
        }
        steady = [
            c["steady_rows_per_s"] / b["steady_rows_per_s"]
            for c, b in zip(current, baseline, strict=True)
            if c["steady_rows_per_s"] and b["steady_rows_per_s"]
        ]
        if steady:
            entry["steady_paired_runs"] = [round(ratio, 3) for ratio in steady]
        compared.append(entry)
    return compared


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--records",
        type=int,
        default=10_000_000,
        help="records produced (the ETL's steady rate spans all micro-batches but the first)",
    )
    parser.add_argument(
        "--trigger-records",
        type=trigger_size,
        nargs="+",
        default=[None, 1_000_000, 2_000_000],
        help=f"maxRecordsPerTrigger of the ETL, one set of runs per value; {ALL!r}: no cap, "
        "as `weir pipeline logs` runs by default (default: all 1000000 2000000)",
    )
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--etl-repeat", type=int, default=2, help="ETL runs per micro-batch size")
    parser.add_argument("--parse-records", type=int, default=200_000)
    parser.add_argument(
        "--baseline", help="a commit whose job runs beside this checkout's, run for run"
    )
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "pipeline.json"
    )
    parser.add_argument(
        "--dedupe",
        action="store_true",
        help="records with the agent's headers and 1%% copies; each ETL run with --dedupe too",
    )
    parser.add_argument(
        "--iceberg",
        action="store_true",
        help="each ETL run of this checkout made again writing Iceberg tables (--output iceberg)",
    )
    parser.add_argument("--etl-worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dedupe and args.baseline:
        parser.error("--dedupe and --baseline are not combined")
    return args


if __name__ == "__main__":
    raise SystemExit(main())
