"""`weir pipeline logs`: the log ETL job from a topic of raw lines to a Parquet warehouse, or
(`--output iceberg`) to Iceberg tables in a SQL catalog.
`weir pipeline iceberg maintain`: compacts the Iceberg tables' small files, expires old snapshots.
`weir pipeline audit`: the brokers' audit topic `__audit` to the warehouse table `audit`.

`--command-config FILE` and `-X KEY=VALUE` give its Kafka clients (the source's readers, the
metrics topic's producer) their settings, security ones included (librdkafka's names)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from weir.cli.clients import add_bootstrap, add_client_settings, security_settings
from weir.cli.logformats import add_formats_option, registry_of
from weir.cli.pipeline_config import (
    OUTPUTS,
    PipelineConfigError,
    add_config_option,
    merged,
)

if TYPE_CHECKING:
    from weir.pipeline.logs_job import LogsJob


def register(commands: Any) -> None:
    parser = commands.add_parser("pipeline", help="Spark jobs over weir topics")
    sub = parser.add_subparsers(dest="pipeline_command", required=True, metavar="JOB")
    logs = sub.add_parser(
        "logs", help="raw log lines in a topic to Parquet or Iceberg tables"
    )
    logs.add_argument("--topic", required=True, help="topic of raw lines; the key names the source")
    logs.add_argument("--warehouse", type=Path, required=True, help="directory of the tables")
    logs.add_argument("--checkpoint", type=Path, required=True, help="Spark checkpoint directory")
    logs.add_argument("--once", action="store_true", help="process what is there now, then exit")
    logs.add_argument("--master", default="local[*]", help="Spark master URL")
    logs.add_argument("--metrics-topic", help="topic of per-minute metrics (default TOPIC.metrics)")
    logs.add_argument(
        "--max-records-per-trigger", type=int, help="cap on the records of one micro-batch"
    )
    logs.add_argument("--driver-memory", default="1g")
    logs.add_argument(
        "--dedupe",
        nargs="?",
        const="agent",
        metavar="KEY",
        help="write a record that reached the topic twice once, named by KEY: agent (the "
        "headers weir.agent and weir.pos; the default) or FIELD[,FIELD...]:POSITION",
    )
    logs.add_argument(
        "--dedupe-window",
        metavar="DURATION",
        help="how long a writer's highest position is kept after its last record (7d)",
    )
    logs.add_argument(
        "--output",
        choices=OUTPUTS,
        help="parquet: Parquet files under the warehouse (the default); iceberg: Iceberg tables "
        "in a catalog (--catalog-uri, --namespace), their files under the warehouse",
    )
    add_catalog_options(logs)
    add_formats_option(logs)
    add_bootstrap(logs)
    add_client_settings(logs)
    logs.set_defaults(run=run_logs)
    add_config_option(logs)  # last: it makes the flags above optional, the file filling in
    iceberg = sub.add_parser("iceberg", help="the log ETL's Iceberg tables")
    iceberg_sub = iceberg.add_subparsers(dest="iceberg_command", required=True, metavar="COMMAND")
    maintain = iceberg_sub.add_parser(
        "maintain", help="compact small files and expire old snapshots of the tables"
    )
    maintain.add_argument("--warehouse", type=Path, required=True, help="directory of the tables")
    add_catalog_options(maintain)
    maintain.add_argument(
        "--expire-older-than",
        type=duration,
        default=timedelta(days=7),
        metavar="DURATION",
        help="expire snapshots older than this (7d; also 12h, 30m, 90s)",
    )
    maintain.add_argument(
        "--target-file-size",
        type=size,
        default=128 << 20,
        metavar="SIZE",
        help="rewrite a partition's files smaller than this into one (128m; also 64k, 1g)",
    )
    maintain.set_defaults(run=run_maintain)
    audit = sub.add_parser("audit", help="the audit topic __audit to the warehouse table audit")
    audit.add_argument("--warehouse", type=Path, required=True, help="directory of the tables")
    audit.add_argument("--master", default="local[*]", help="Spark master URL")
    audit.add_argument("--driver-memory", default="1g")
    add_bootstrap(audit)
    add_client_settings(audit)
    audit.set_defaults(run=run_audit)


def run_logs(args: argparse.Namespace) -> int:
    from pyspark.errors import StreamingQueryException

    from weir.cli.etl_progress import BacklogReporter
    from weir.logformats import FormatFileError
    from weir.pipeline.dedupe import DedupeKeyError
    from weir.pipeline.logs_job import SPARK_CONFIG, run_logs_job
    from weir.pipeline.session import weir_session

    try:
        args = merged(args)
        registry_of(args.formats)  # a bad format file stops here, before any data is read
        job = logs_job(args)
    except (PipelineConfigError, FormatFileError, DedupeKeyError) as error:
        print(f"weir: {error}", file=sys.stderr)
        return 2

    spark = weir_session(
        master=args.master,
        app_name="weir pipeline logs",
        config={**SPARK_CONFIG, "spark.driver.memory": args.driver_memory},
    )
    spark.sparkContext.setLogLevel("ERROR")
    stop = _stop_on_signals()
    reporter = BacklogReporter(job.client(), job.topic)
    try:
        started = time.monotonic()
        summary = run_logs_job(spark, job, stop=stop, on_poll=reporter)
        elapsed = time.monotonic() - started
    except StreamingQueryException as exc:
        print(f"weir: the pipeline failed: {exc.getMessage()}", file=sys.stderr)
        return 1
    finally:
        reporter.close()
        spark.stop()
    report = {
        "batches": summary.batches,
        "skipped_batches": summary.replayed,
        "records": summary.records,
        "logs": summary.logs,
        "quarantined": summary.quarantined,
        "duplicates": summary.duplicates,
        "seconds": round(elapsed, 3),
        "warehouse": str(job.warehouse),
        "output": "parquet" if job.iceberg is None else "iceberg",
        "metrics_topic": job.metrics_topic_name,
    }
    print(json.dumps(report, sort_keys=True), flush=True)
    return 0


def add_catalog_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--catalog-uri",
        metavar="URI",
        help="the Iceberg SQL catalog: sqlite:///PATH (default: catalog.db in the warehouse) or "
        "postgresql+psycopg://USER:PASSWORD@HOST/DB",
    )
    parser.add_argument(
        "--namespace", metavar="NAME", help="the catalog namespace of the tables (weir)"
    )


def duration(text: str) -> timedelta:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    stripped = text.strip().lower()
    scale = units.get(stripped[-1:])
    try:
        seconds = float(stripped[:-1] if scale is not None else stripped) * (scale or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected e.g. 7d, 12h, 30m or 90s") from None
    return timedelta(seconds=seconds)


def size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    stripped = text.strip().lower().removesuffix("b")
    scale = units.get(stripped[-1:])
    try:
        number = int(float(stripped[:-1] if scale is not None else stripped) * (scale or 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected e.g. 128m, 64k or 1g") from None
    if number <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be positive")
    return number


def run_maintain(args: argparse.Namespace) -> int:
    """Compact and expire the Iceberg tables (`weir.pipeline.iceberg_tables.maintain`)."""
    from weir.pipeline.iceberg_tables import DEFAULT_NAMESPACE, IcebergOutput, maintain

    output = IcebergOutput(warehouse=args.warehouse.resolve(), catalog_uri=args.catalog_uri,
                           namespace=args.namespace or DEFAULT_NAMESPACE)  # fmt: skip
    report = maintain(output, expire_older_than=args.expire_older_than,
                      target_file_bytes=args.target_file_size)  # fmt: skip
    print(json.dumps({"tables": report, "catalog": output.uri}, sort_keys=True), flush=True)
    return 0


def run_audit(args: argparse.Namespace) -> int:
    """Load `__audit` into `<warehouse>/audit` (`weir.pipeline.audit_table`)."""
    from pyspark.errors import PySparkException

    from weir.pipeline.audit_table import TABLE, load_audit
    from weir.pipeline.session import weir_session

    options = {"bootstrap.servers": args.bootstrap_server,
               **{f"kafka.{k}": str(v) for k, v in security_settings(args).items()}}  # fmt: skip
    spark = weir_session(master=args.master, app_name="weir pipeline audit",
                         config={"spark.driver.memory": args.driver_memory})  # fmt: skip
    spark.sparkContext.setLogLevel("ERROR")
    warehouse = args.warehouse.resolve()
    try:
        rows = load_audit(spark, options, warehouse)
    except PySparkException as exc:
        print(f"weir: loading __audit failed: {exc}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    print(json.dumps({"rows": rows, "table": str(warehouse / TABLE)}), flush=True)
    return 0


def logs_job(args: argparse.Namespace) -> LogsJob:
    from weir.pipeline.dedupe import DedupeKey, parse_window
    from weir.pipeline.iceberg_tables import IcebergOutput
    from weir.pipeline.logs_job import LogsJob

    warehouse = args.warehouse.resolve()
    iceberg = None
    if args.output == "iceberg":
        iceberg = IcebergOutput(warehouse=warehouse, catalog_uri=args.catalog_uri,
                                namespace=args.namespace)  # fmt: skip
    return LogsJob(
        bootstrap=args.bootstrap_server,
        topic=args.topic,
        warehouse=warehouse,
        checkpoint=args.checkpoint.resolve(),
        metrics_topic=args.metrics_topic,
        once=args.once,
        max_records_per_trigger=args.max_records_per_trigger,
        formats=tuple(path.resolve() for path in args.formats),
        client_settings={k: str(v) for k, v in security_settings(args).items()},
        dedupe=DedupeKey.parse(args.dedupe) if args.dedupe is not None else None,
        dedupe_window_s=parse_window(args.dedupe_window),
        iceberg=iceberg,
    )


def _stop_on_signals() -> threading.Event:
    """An event set by SIGINT or SIGTERM: the job then stops its query and exits cleanly."""
    stop = threading.Event()

    def request_stop(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    return stop
