"""Consumer framework benchmark: records/s through `weir.consumer` with a trivial handler, beside
a bare confluent-kafka consume loop over the same records, in one run.

Starts `weir broker start` (single node) on an ephemeral port, produces --records 100-byte
records into an 8-partition topic, then reads the whole topic again and again, each time in a
new consumer group from the beginning, alternating:
- bare: one thread, `Consumer.consume(500)` in a loop, the handler called on each message, with
  the librdkafka settings the framework uses (and auto-commit, as a plain application would);
- bare-default: the same loop with librdkafka's default settings;
- framework: `LogConsumer` with 1 and with 4 worker threads, per-partition order, at-least-once.
Once each, for reference: 2 worker processes, and exactly-once into an SQLite sink.
All of that first with the interpreter's default garbage collector settings, then again (bare
and framework alike) after `tune_gc()`, which is what `weir consumer run` does to its process.
The handler is the same trivial function everywhere (it counts). A rate is timed from the first
record handled to the last, so joining the group is not counted. Medians of --repeat runs.
Writes JSON to bench/results/consumer.json (or --out) and prints it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from broker import start_broker
from weir.consumer import ConsumerSettings, Delivery, LogConsumer, WorkerKind, tune_gc
from weir.consumer.sinks import sink_factory

TOPIC = "bench-consumer"
PARTITIONS = 8
RECORD_BYTES = 100
TIMEOUT_S = 300
counter = itertools.count()


def handler(_record: object) -> None:
    """The trivial handler: counts (picklable by name, for process workers)."""
    next(counter)


def broker_config(scratch: Path) -> Path:
    config = scratch / "broker.toml"
    config.write_text('"group.initial.rebalance.delay.ms" = 0\n')
    return config


def produce(bootstrap: str, count: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "1",
                         "batch.size": 1_000_000, "queue.buffering.max.messages": 2_000_000,
                         "log_level": 3})  # fmt: skip
    value = os.urandom(RECORD_BYTES // 2).hex().encode()
    for n in range(count):
        while True:
            try:
                producer.produce(TOPIC, value, str(n % 1000).encode())
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120):
        raise RuntimeError("not every record was acknowledged")


class Stopwatch:
    """Times the handling from the first record to the `expected`-th by watching a count from a
    thread (1 ms resolution): the handler's own count for the bare loop, the framework's
    handled-records count (updated per run of records) for the framework."""

    def __init__(self, expected: int, count: Callable[[], int] | None = None) -> None:
        self.expected = expected
        self._count = count or _count
        self.base = self._count()
        self.first_s = self.last_s = 0.0
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def handled(self) -> int:
        return self._count() - self.base

    def _watch(self) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while not self.first_s and time.monotonic() < deadline:
            if self.handled():
                self.first_s = time.perf_counter()
            time.sleep(0.001)
        while self.handled() < self.expected and time.monotonic() < deadline:
            time.sleep(0.001)
        self.last_s = time.perf_counter()
        self.done.set()

    def result(self) -> dict[str, Any]:
        self.done.wait(TIMEOUT_S)
        seconds = self.last_s - self.first_s
        handled = self.handled()
        return {"records": handled, "seconds": round(seconds, 3),
                "records_per_s": round(handled / seconds) if seconds > 0 else 0}  # fmt: skip


def _count() -> int:
    value: int = counter.__reduce__()[1][0]
    return value


def settings(bootstrap: str, group: str, **overrides: Any) -> ConsumerSettings:
    return ConsumerSettings(
        bootstrap_servers=bootstrap, group_id=group, topics=(TOPIC,), **overrides
    )


def bare(bootstrap: str, expected: int, group: str, tuned: bool) -> dict[str, Any]:
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group,
                              "auto.offset.reset": "earliest", "log_level": 3}  # fmt: skip
    if tuned:
        config = settings(bootstrap, group).consumer_config()
        config.update({"enable.auto.commit": True, "enable.auto.offset.store": True})
    consumer = Consumer(config)
    consumer.subscribe([TOPIC])
    watch = Stopwatch(expected)
    deadline = time.monotonic() + TIMEOUT_S
    while not watch.done.is_set() and time.monotonic() < deadline:
        for message in consumer.consume(500, 0.1):
            if message.error() is None:
                handler(message)
    consumer.close()
    return watch.result()


def framework(bootstrap: str, expected: int, group: str, **overrides: Any) -> dict[str, Any]:
    sinks: Callable[[], Any] | None = overrides.pop("sink_factory", None)
    target: Any = overrides.pop("handler", handler)
    consumer = LogConsumer(settings(bootstrap, group, **overrides), target, sink_factory=sinks)
    runner = threading.Thread(target=consumer.run)
    watch = Stopwatch(expected, lambda: consumer.handled)
    runner.start()
    result = watch.result()
    consumer.stop()
    runner.join(60)
    return result


def contenders(scratch: Path) -> dict[str, Callable[[str, int, str], dict[str, Any]]]:
    return {
        "bare": lambda b, n, g: bare(b, n, g, tuned=True),
        "bare_default_config": lambda b, n, g: bare(b, n, g, tuned=False),
        "framework_1_thread": lambda b, n, g: framework(b, n, g, workers=1),
        "framework_4_threads": lambda b, n, g: framework(b, n, g, workers=4),
    }


def references(scratch: Path) -> dict[str, Callable[[str, int, str], dict[str, Any]]]:
    return {
        "framework_2_processes": lambda b, n, g: framework(
            b, n, g, workers=2, worker_kind=WorkerKind.PROCESS, handler="consumer:handler"
        ),
        "framework_exactly_once_sqlite_4_threads": lambda b, n, g: framework(
            b,
            n,
            g,
            workers=4,
            delivery=Delivery.EXACTLY_ONCE,
            sink_factory=sink_factory(f"sqlite:{scratch / 'sink.db'}"),
        ),
    }


GROUPS = (f"bench-{n}" for n in itertools.count())


def run_all(
    bootstrap: str, records: int, repeat: int, scratch: Path, with_references: bool
) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {}
    for _ in range(repeat):
        for name, run in contenders(scratch).items():
            runs.setdefault(name, []).append(run(bootstrap, records, next(GROUPS)))
    if with_references:
        for name, run in references(scratch).items():
            runs[name] = [run(bootstrap, records, next(GROUPS))]
    return {name: _summary(results) for name, results in runs.items()}


def ratios(results: dict[str, Any]) -> dict[str, float]:
    bare_rate = results["bare"]["records_per_s"]
    return {
        name: round(result["records_per_s"] / bare_rate, 3)
        for name, result in results.items()
        if name.startswith("framework")
    }


def _summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    rates = [r["records_per_s"] for r in results]
    return {"records_per_s": round(statistics.median(rates)), "runs": results}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "consumer.json"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="weir-bench-") as scratch:
        process, bootstrap = start_broker(Path(scratch) / "data", broker_config(Path(scratch)))
        try:
            produce(bootstrap, args.records)
            default_gc = run_all(bootstrap, args.records, args.repeat, Path(scratch), True)
            tune_gc()
            tuned_gc = run_all(bootstrap, args.records, args.repeat, Path(scratch), False)
        finally:
            process.terminate()
            process.wait(30)
    report = {
        "benchmark": "consumer",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "settings": {
            "records": args.records,
            "record_bytes": RECORD_BYTES,
            "partitions": PARTITIONS,
            "handler": "trivial (counts)",
            "repeat": args.repeat,
            "framework": "per-partition order, at-least-once, defaults otherwise",
        },
        "default_gc": {"results": default_gc, "framework_vs_bare": ratios(default_gc)},
        "tuned_gc": {"results": tuned_gc, "framework_vs_bare": ratios(tuned_gc)},
        "target": "framework >= 0.7 x bare",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
