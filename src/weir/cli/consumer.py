"""`weir consumer run MODULE:FUNCTION`: run a handler over topics with the consumer framework.

MODULE is a dotted module importable from the current directory or a path to a .py file;
FUNCTION receives a `weir.consumer.Record` (key, value, headers, topic, partition, offset,
timestamp). In exactly-once mode its return value is the record's result, stored in
the `--sink` together with the offsets, or written to `--output-topic` in a Kafka transaction
that commits the offsets too. Runs until SIGTERM or SIGINT, then finishes running
work, commits and leaves the group. Client settings (security ones included, librdkafka's
names) come from `--command-config FILE`, `-X KEY=VALUE` and `--config KEY=VALUE`; a refused
authentication stops the consumer with exit 1. Prometheus metrics are served on --metrics-port.
The process is the consumer's, so its garbage collector is tuned for it (`tune_gc`).
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

from weir.cli.clients import add_bootstrap, add_client_settings, security_settings
from weir.consumer import (
    ConsumerFailedError,
    ConsumerSettings,
    Delivery,
    HandlerNotFoundError,
    LogConsumer,
    Ordering,
    RetryPolicy,
    WorkerKind,
    load_handler,
    tune_gc,
)
from weir.consumer.sink import DEFAULT_RESULTS_TABLE
from weir.consumer.sinks import sink_factory


def register(commands: Any) -> None:
    parser = commands.add_parser("consumer", help="run a handler over topics")
    sub = parser.add_subparsers(dest="consumer_command", required=True, metavar="ACTION")
    run = sub.add_parser("run", help="run MODULE:FUNCTION over every record of the topics")
    run.add_argument("handler", metavar="MODULE:FUNCTION")
    run.add_argument("--topic", action="append", required=True, help="repeat for several")
    run.add_argument("--group", required=True)
    run.add_argument("--workers", type=int, default=4)
    run.add_argument("--processes", action="store_true", help="workers are processes")
    run.add_argument("--mode", choices=[d.value for d in Delivery], default="at-least-once")
    run.add_argument("--ordering", choices=[o.value for o in Ordering], default="partition")
    run.add_argument("--sink", help="exactly-once sink: sqlite:PATH or postgresql://...")
    run.add_argument("--sink-table", default=DEFAULT_RESULTS_TABLE)
    run.add_argument("--output-topic", help="exactly-once to a topic: results written there in "
                     "Kafka transactions that also commit the input offsets")  # fmt: skip
    _add_tuning(run)
    add_bootstrap(run)
    add_client_settings(run)
    run.set_defaults(run=run_consumer)


def _add_tuning(run: argparse.ArgumentParser) -> None:
    run.add_argument("--fetchers", type=int, default=1, help="consumer threads (group members)")
    run.add_argument("--max-buffered", type=int, default=1000, help="records fetched, unfinished")
    run.add_argument("--max-prefetch-bytes", type=int, default=4 * 1024 * 1024)
    run.add_argument("--commit-interval-ms", type=int, default=1000)
    run.add_argument("--revocation-timeout-ms", type=int, default=10_000)
    run.add_argument("--retries", type=int, default=3)
    run.add_argument("--retry-backoff-ms", type=int, default=100)
    run.add_argument("--dead-letter-topic", help="default: TOPIC.dlq")
    run.add_argument("--metrics-host", default="127.0.0.1")
    run.add_argument("--metrics-port", type=int, default=0, help="0: any free port")
    run.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE", help="librdkafka setting"
    )


def settings_from(args: argparse.Namespace) -> ConsumerSettings:
    return ConsumerSettings(
        bootstrap_servers=args.bootstrap_server,
        group_id=args.group,
        topics=tuple(args.topic),
        workers=args.workers,
        worker_kind=WorkerKind.PROCESS if args.processes else WorkerKind.THREAD,
        ordering=Ordering(args.ordering),
        delivery=Delivery(args.mode),
        fetchers=args.fetchers,
        max_buffered_records=args.max_buffered,
        max_prefetch_bytes=args.max_prefetch_bytes,
        commit_interval_ms=args.commit_interval_ms,
        revocation_timeout_ms=args.revocation_timeout_ms,
        retry=RetryPolicy(retries=args.retries, backoff_ms=args.retry_backoff_ms),
        dead_letter_topic=args.dead_letter_topic,
        client_config={**_pairs(args.config), **security_settings(args)},
    )


def _pairs(items: list[str]) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"weir: expected KEY=VALUE, got {item!r}")
        pairs[key] = value
    return pairs


def run_consumer(args: argparse.Namespace) -> int:
    try:
        consumer = _build(args)
    except (HandlerNotFoundError, ValueError) as exc:
        print(f"weir: {exc}", file=sys.stderr)
        return 2
    tune_gc()
    endpoint = consumer.serve_metrics(args.metrics_host, args.metrics_port)
    previous = {sig: signal.signal(sig, lambda *_: consumer.stop()) for sig in _STOP_SIGNALS}
    print(
        f"weir consumer running: group {args.group}, topics {','.join(args.topic)}, "
        f"metrics on http://{endpoint.address}/metrics",
        flush=True,
    )
    try:
        consumer.run()
    except ConsumerFailedError as exc:
        print(f"weir: consumer failed: {exc}", file=sys.stderr)
        return 1
    finally:
        endpoint.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _build(args: argparse.Namespace) -> LogConsumer:
    settings = settings_from(args)
    exactly_once = settings.delivery is Delivery.EXACTLY_ONCE
    if exactly_once and not (args.sink or args.output_topic):
        raise ValueError("--mode exactly-once needs --sink sqlite:PATH or postgresql://..., or "
                         "--output-topic TOPIC")  # fmt: skip
    if args.sink and args.output_topic:
        raise ValueError("--sink and --output-topic are two destinations: choose one")
    if (args.sink or args.output_topic) and not exactly_once:
        raise ValueError("--sink and --output-topic are used only with --mode exactly-once")
    function = load_handler(args.handler)  # fails early, before joining the group
    handler = args.handler if args.processes else function
    sinks = sink_factory(args.sink, args.sink_table) if args.sink else None
    return LogConsumer(settings, handler, sink_factory=sinks, output_topic=args.output_topic)
