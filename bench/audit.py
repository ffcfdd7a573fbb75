"""What the broker's audit and metrics cost: produce throughput and broker CPU per million
messages with both off, with audit alone on, and with audit and metrics on, in the same run.

Starts a single-node broker per run (`bench/broker.py`'s `start_broker`): "off" with
`audit.enable = false` and no metrics, "audit" with `audit.enable = true` (counts written to
`__audit` every `--flush-interval-ms`, so that flushes happen within a run), and "both" with
audit on and `metrics.port` set, scraped once a second (`bench/metrics.py`'s `Scraper`). Each
run produces `--messages` 100-byte messages with confluent-kafka (acks=1, linger.ms 5) to a
topic of `--partitions` partitions; `--rounds` rounds of the three runs, interleaved so that
drift on a shared machine hits them alike. Reports the median messages/s and broker
CPU-seconds per million messages of each, their ratios to "off", and the nanoseconds counting
one produce request's batches for the audit takes in this process. Writes JSON to
bench/results/audit.json (or --out) and prints it.
"""

from __future__ import annotations

import argparse
import contextvars
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from weir.broker.audit import AuditLog
from weir.broker.security.listeners import Listener, SecurityProtocol
from weir.broker.security.session import Session, bind
from weir.clock import SystemClock

sys.path.insert(0, str(Path(__file__).parent))
from broker import produce, start_broker
from metrics import Scraper, free_port

TOPIC = "audited"
LABELS = ("off", "audit", "both")


def counting_cost(partitions: int, repeat: int = 20_000) -> float:
    """Nanoseconds the audit spends counting one produce request of `partitions` batches, in
    this process (as the produce handler calls it, inside a connection's session)."""
    audit = AuditLog(0, SystemClock())
    listener = Listener("PLAINTEXT", SecurityProtocol.PLAINTEXT, "127.0.0.1", 9092)

    def run() -> int:
        bind(Session(listener, "127.0.0.1"))
        started = time.perf_counter_ns()
        for _ in range(repeat):
            for partition in range(partitions):
                audit.produced("bench-producer", TOPIC, partition, 16_384, 160)
        return time.perf_counter_ns() - started

    return round(contextvars.copy_context().run(run) / repeat)


def one_run(scratch: Path, args: argparse.Namespace, label: str) -> dict[str, Any]:
    scratch.mkdir()
    port = free_port()
    settings = {"audit.enable": label != "off", "audit.flush.interval.ms": args.flush_interval_ms}
    if label == "both":
        settings["metrics.port"] = port
    config = scratch / "broker.toml"
    config.write_text("".join(f'"{k}" = {json.dumps(v)}\n' for k, v in settings.items()))
    process, bootstrap = start_broker(scratch / "data", config)
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, args.partitions)])[TOPIC].result(60)
        if label != "both":
            return produce(bootstrap, TOPIC, args.messages, 100, "1", broker_pid=process.pid,
                           partitions=args.partitions)  # fmt: skip
        with Scraper(f"http://127.0.0.1:{port}/metrics") as scraper:
            result = produce(bootstrap, TOPIC, args.messages, 100, "1", broker_pid=process.pid,
                             partitions=args.partitions)  # fmt: skip
        result["scrapes"] = len(scraper.durations_ms)
        return result
    finally:
        process.terminate()
        process.wait(60)


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "msgs_per_s_median": round(statistics.median(r["msgs_per_s"] for r in runs)),
        "broker_cpu_s_per_million_msgs_median": round(
            statistics.median(r["broker_cpu_s_per_million_msgs"] for r in runs), 3
        ),
        "runs": runs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=1_500_000,
                        help="100-byte messages per run")  # fmt: skip
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the three runs")
    parser.add_argument("--flush-interval-ms", type=int, default=5_000,
                        help="audit.flush.interval.ms of the runs with audit on")  # fmt: skip
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "audit.json"
    )
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in LABELS}
    with tempfile.TemporaryDirectory(prefix="weir-bench-audit-") as name:
        for round_ in range(args.rounds):
            for label in LABELS:
                scratch = Path(name) / f"{label}-{round_}"
                runs[label].append(one_run(scratch, args, label))
    summaries = {label: summary(runs[label]) for label in LABELS}
    off = summaries["off"]

    def ratios(label: str) -> dict[str, float]:
        on = summaries[label]
        return {
            "throughput_vs_off": round(on["msgs_per_s_median"] / off["msgs_per_s_median"], 3),
            "cpu_vs_off": round(on["broker_cpu_s_per_million_msgs_median"]
                                / off["broker_cpu_s_per_million_msgs_median"], 3),
        }  # fmt: skip

    report = {
        "benchmark": "audit",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "settings": {
            "client": "confluent-kafka (librdkafka), acks=1, linger.ms 5, 100-byte messages",
            "messages_per_run": args.messages,
            "partitions": args.partitions,
            "audit_flush_interval_ms": args.flush_interval_ms,
            "metrics_scrape_interval_s": 1.0,
            "rounds": args.rounds,
        },
        "off": off,
        "audit": summaries["audit"],
        "audit_and_metrics": summaries["both"],
        "audit_vs_off": ratios("audit"),
        "audit_and_metrics_vs_off": ratios("both"),
        "audit_ns_per_produce_request": {
            "1 partition": counting_cost(1),
            f"{args.partitions} partitions": counting_cost(args.partitions),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
