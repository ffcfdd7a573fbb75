"""What the broker's Prometheus metrics cost: produce throughput and broker CPU with
`metrics.port` off and on, in the same run.

Starts a single-node broker per run (`bench/broker.py`'s `start_broker`), alternately without
metrics and with them, scraped once a second over HTTP as Prometheus would (the scrape takes a
snapshot on the broker's event loop). Each run produces `--messages` 100-byte messages with
confluent-kafka (acks=1, linger.ms 5) to a topic of `--partitions` partitions; `--rounds` pairs
of runs, off and on interleaved so that drift on a shared machine hits both alike. Reports the
median messages/s and broker CPU-seconds per million messages of each, and with that many
partitions a scrape's duration, size and broker CPU (50 scrapes of the idle broker after each
"on" run), and the nanoseconds counting one produce request takes. Writes JSON to
bench/results/metrics.json (or --out) and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from weir.broker.metrics.stats import BrokerStats

sys.path.insert(0, str(Path(__file__).parent))
from broker import cpu_seconds, produce, start_broker

TOPIC = "metered"
SCRAPE_INTERVAL_S = 1.0


class Scraper:
    """GET /metrics every SCRAPE_INTERVAL_S in a thread; the durations and sizes seen."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.durations_ms: list[float] = []
        self.sizes: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scraper", daemon=True)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def scrape(self) -> None:
        started = time.perf_counter()
        with urllib.request.urlopen(self.url, timeout=10) as response:
            body = response.read()
        self.durations_ms.append((time.perf_counter() - started) * 1000)
        self.sizes.append(len(body))

    def _run(self) -> None:
        while not self._stop.wait(SCRAPE_INTERVAL_S):
            self.scrape()


def scrape_cost(scraper: Scraper, broker_pid: int, count: int = 50) -> float:
    """Broker CPU milliseconds per scrape, over `count` scrapes of an idle broker."""
    before = cpu_seconds(broker_pid)
    for _ in range(count):
        scraper.scrape()
    return round((cpu_seconds(broker_pid) - before) / count * 1000, 2)


def counting_cost(partitions: int, repeat: int = 20_000) -> float:
    """Nanoseconds the broker spends counting one produce request of `partitions` batches
    (the request, its time, and bytes and messages in per batch), in this process."""
    stats = BrokerStats()
    started = time.perf_counter_ns()
    for _ in range(repeat):
        for _partition in range(partitions):
            stats.appended(TOPIC, _partition, 16_384, 160)
        stats.answered(0, 9, [])
        stats.timed(0, (10_000, 200_000, 1_000_000, 20_000, 1_230_000))
    return round((time.perf_counter_ns() - started) / repeat)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def one_run(scratch: Path, args: argparse.Namespace, metrics: bool) -> dict[str, Any]:
    scratch.mkdir()
    config = None
    port = free_port()
    if metrics:
        config = scratch / "broker.toml"
        config.write_text(f'"metrics.port" = {port}\n')
    process, bootstrap = start_broker(scratch / "data", config)
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, args.partitions)])[TOPIC].result(60)
        if not metrics:
            return produce(bootstrap, TOPIC, args.messages, 100, "1", broker_pid=process.pid,
                           partitions=args.partitions)  # fmt: skip
        with Scraper(f"http://127.0.0.1:{port}/metrics") as scraper:
            result = produce(bootstrap, TOPIC, args.messages, 100, "1", broker_pid=process.pid,
                             partitions=args.partitions)  # fmt: skip
        result["scrapes"] = len(scraper.durations_ms)
        result["scrape_ms_median"] = round(statistics.median(scraper.durations_ms), 2)
        result["broker_cpu_ms_per_scrape"] = scrape_cost(scraper, process.pid)
        result["scrape_bytes"] = scraper.sizes[-1]
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
    parser.add_argument("--rounds", type=int, default=3, help="pairs of runs, off then on")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "metrics.json"
    )
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory(prefix="weir-bench-metrics-") as name:
        for round_ in range(args.rounds):
            for label in ("off", "on"):
                scratch = Path(name) / f"{label}-{round_}"
                runs[label].append(one_run(scratch, args, metrics=label == "on"))
    off, on = summary(runs["off"]), summary(runs["on"])
    report = {
        "benchmark": "metrics",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "settings": {
            "client": "confluent-kafka (librdkafka), acks=1, linger.ms 5, 100-byte messages",
            "messages_per_run": args.messages,
            "partitions": args.partitions,
            "scrape_interval_s": SCRAPE_INTERVAL_S,
            "rounds": args.rounds,
        },
        "metrics_off": off,
        "metrics_on": on,
        "throughput_on_vs_off": round(on["msgs_per_s_median"] / off["msgs_per_s_median"], 3),
        "counting_ns_per_produce_request": {
            "1 partition": counting_cost(1), f"{args.partitions} partitions":
            counting_cost(args.partitions),
        },
        "broker_cpu_ms_per_scrape_median": statistics.median(
            r["broker_cpu_ms_per_scrape"] for r in runs["on"]
        ),
        "cpu_on_vs_off": round(
            on["broker_cpu_s_per_million_msgs_median"]
            / off["broker_cpu_s_per_million_msgs_median"], 3
        ),
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
