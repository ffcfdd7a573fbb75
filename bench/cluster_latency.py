"""acks=all latency on a cluster: the replication round trip every Kafka producer waits for.

ZooKeeper and three brokers on loopback; a topic of one partition with replicas 1, 2, 3 (broker
1 leads), `min.insync.replicas` 2. `latency_client.c` (a client in C on librdkafka, built here
as `broker.py` builds it) sends 100-byte messages at each rate (default 50, 500 and 5,000
msgs/s, linger.ms 5, acks=all) and reports produce-to-ack and produce-to-consume p50, p99 and
p99.9. Then, with confluent-kafka, a throughput run of large batches (linger.ms 5) with acks=1
and with acks=all (idempotent), and their ratio.

With `--baseline REF` the same measurements run on that commit too (its sources exported from
git into the scratch directory), the two clusters taking turns, one round each, `--runs`
rounds; the report has both side by side. With `--trace` the brokers run under
`replication_trace.py`, which times every step of each produce's round trip; the report then
has the steps' figures per run and the steps of the slowest messages.

Each run notes the machine's idle share and load average while it ran. Writes JSON to
bench/results/cluster_latency.json (or --out) and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # waiting
sys.path.insert(0, str(ROOT / "tests" / "cluster"))
from cluster_brokers import (  # noqa: E402
    CHROOT,
    BrokerSet,
    ClusterBroker,
    create_topics,
    metadata_of,
    poll,
    start_together,
    wait_settled,
)
from cluster_processes import start_zookeeper  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

import replication_trace  # noqa: E402
from broker import _reuse_extensions, build_latency_client, produce  # noqa: E402
from weir.cli.zookeeper import find_installation  # noqa: E402

TOPIC = "acks-all-latency"
LEADER = 1
BROKERS = 3
TRACER = Path(__file__).with_name("replication_trace.py")


class TracedBroker(ClusterBroker):
    """A cluster broker started under `replication_trace.py`, its notes in `trace_path`."""

    @property
    def trace_path(self) -> Path:
        return self.directory / "trace.json"

    def command(self) -> list[str]:
        command = super().command()
        at = command.index("-m")
        return [command[0], str(TRACER), "--serve", str(self.trace_path), *command[at + 2 :]]


class Cluster:
    """ZooKeeper and brokers 1..3 from the sources under `source` (the installed ones if None)."""

    def __init__(self, scratch: Path, source: Path | None, *, trace: bool) -> None:
        self.scratch = scratch
        self.source = source
        self.trace = trace
        self.zookeeper: Any = None
        self.brokers = BrokerSet(scratch / "brokers")
        self.started: dict[int, ClusterBroker] = {}

    def __enter__(self) -> Cluster:
        saved = os.environ.get("PYTHONPATH")
        if self.source is not None:
            os.environ["PYTHONPATH"] = str(self.source)
        try:
            self.zookeeper = start_zookeeper(self.scratch / "zookeeper", find_installation())
            connect = f"{self.zookeeper.connect}{CHROOT}"
            kind = TracedBroker if self.trace else ClusterBroker
            for node in range(1, BROKERS + 1):
                broker = kind(self.scratch / "brokers" / f"broker-{node}", node, connect)
                self.brokers.brokers.append(broker)
                self.started[node] = broker
            start_together(self.started.values())
        except BaseException:
            self.__exit__()
            raise
        finally:
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved
        wait_settled(self.started.values())
        return self

    def __exit__(self, *exc: object) -> None:
        for broker in self.started.values():
            broker.stop(timeout=60)
        self.brokers.kill_all()
        if self.zookeeper is not None:
            self.zookeeper.stop()

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.started.values())

    def create_topic(self, name: str) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        topic = NewTopic(name, 1, replica_assignment=[[LEADER, 2, 3]],
                         config={"min.insync.replicas": "2"})  # fmt: skip
        create_topics(admin, topic, timeout=60)

        def in_sync() -> bool:
            view = metadata_of(self.started[LEADER].address, [name])
            partition = view.topics.get(name, {}).get(0)
            return (
                partition is not None
                and partition.leader == LEADER
                and len(partition.isr) == BROKERS
            )

        poll(in_sync, 60, f"{name} led by broker {LEADER} with all three in sync")

    def traces(self) -> dict[int, dict[str, Any]]:
        return {node: json.loads(b.trace_path.read_text()) for node, b in self.started.items()
                if isinstance(b, TracedBroker) and b.trace_path.exists()}  # fmt: skip


def _cpu_times() -> list[int]:
    return [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]


def latency_run(
    cluster: Cluster, client: Path, rate: int, seconds: float, linger_ms: int, tag: str
) -> dict[str, Any]:
    topic = f"{TOPIC}-{tag}-{rate}"
    cluster.create_topic(topic)
    before = _cpu_times()
    done = subprocess.run([str(client), cluster.bootstrap, topic, str(rate), str(seconds),
                           str(linger_ms), "all"], check=True, capture_output=True,
                          timeout=seconds + 120)  # fmt: skip
    spent = [b - a for a, b in zip(before, _cpu_times(), strict=True)]
    result: dict[str, Any] = json.loads(done.stdout)
    result["topic"] = topic
    result["machine_idle_share"] = round(spent[3] / sum(spent), 3)
    result["load_average"] = Path("/proc/loadavg").read_text().split()[:3]
    return result


def throughput(cluster: Cluster, count: int, tag: str) -> dict[str, Any]:
    pid = cluster.started[LEADER].pid
    runs = {}
    for acks in ("1", "all"):
        topic = f"{TOPIC}-{tag}-throughput-{acks}"
        cluster.create_topic(topic)
        runs[acks] = produce(cluster.bootstrap, topic, count, 100, acks, broker_pid=pid)
    runs["all_over_1"] = round(runs["all"]["msgs_per_s"] / runs["1"]["msgs_per_s"], 3)
    return runs


def one_round(
    scratch: Path, source: Path | None, client: Path, args: argparse.Namespace, tag: str
) -> dict[str, Any]:
    """One cluster: a latency run per rate, then the throughput run; traced with --trace."""
    with Cluster(scratch, source, trace=args.trace) as cluster:
        runs = [latency_run(cluster, client, rate, args.seconds, args.linger_ms, tag)
                for rate in args.rates]  # fmt: skip
        report: dict[str, Any] = {"latency": runs}
        if args.throughput:
            report["throughput"] = throughput(cluster, args.throughput, tag)
    if args.trace:
        traces = cluster.traces()
        for run in runs:
            rows = replication_trace.steps(traces, LEADER, f"{run['topic']}-0")
            run["steps"] = replication_trace.summary(rows)
            run["slowest_steps"] = replication_trace.attribute(rows, run, traces)
    return report


def export(ref: str, scratch: Path) -> Path:
    """The sources of commit `ref` (git archive), with this tree's built extensions where their
    C sources are the same; returns its source directory."""
    tree = scratch / "baseline-tree"
    tree.mkdir()
    archive = scratch / "baseline.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), ref, "src"],
                   check=True)  # fmt: skip
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    _reuse_extensions(ROOT / "src", tree / "src")
    return tree / "src"


def _figures(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    return {q: [r[key][q] for r in runs] for q in ("p50_ms", "p99_ms", "p999_ms")}


def print_summary(report: dict[str, Any]) -> None:
    for name in ("baseline", "current"):
        rounds = report.get(name)
        if not rounds:
            continue
        print(f"== {name}")
        for rate in report["settings"]["rates"]:
            runs = [r for rnd in rounds for r in rnd["latency"] if r["rate_msgs_per_s"] == rate]
            for key in ("produce_to_ack", "produce_to_consume"):
                f = _figures(runs, key)
                print(f"  {rate:>6}/s {key:<19} p50 {f['p50_ms']}  p99 {f['p99_ms']}  "
                      f"p99.9 {f['p999_ms']}")  # fmt: skip
            print(f"  {'':>8} idle share {[r['machine_idle_share'] for r in runs]}")
        ratios = [rnd["throughput"]["all_over_1"] for rnd in rounds if "throughput" in rnd]
        if ratios:
            print(f"  acks=all / acks=1 throughput: {ratios}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", type=int, nargs="+", default=[50, 500, 5000])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3, help="rounds (a cluster each)")
    parser.add_argument("--throughput", type=int, default=300_000,
                        help="messages of the throughput runs (0: none)")  # fmt: skip
    parser.add_argument("--baseline", help="a commit to measure too, taking turns")
    parser.add_argument("--trace", action="store_true", help="time each replication step")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "cluster_latency.json"
    )
    args = parser.parse_args()
    report: dict[str, Any] = {
        "benchmark": "cluster_latency",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "settings": {"brokers": BROKERS, "replication_factor": 3, "min_insync_replicas": 2,
                     "partitions": 1, "message_bytes": 100, "linger_ms": args.linger_ms,
                     "acks": "all", "idempotence": False, "rates": args.rates,
                     "seconds": args.seconds, "baseline": args.baseline,
                     "traced": args.trace, "started": time.strftime("%Y-%m-%d %H:%M:%S")},
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="weir-cluster-latency-") as name:
        scratch = Path(name)
        client = build_latency_client(scratch)
        sources: list[tuple[str, Path | None]] = [("current", None)]
        if args.baseline:
            sources.insert(0, ("baseline", export(args.baseline, scratch)))
        for n in range(args.runs):
            for label, source in sources:
                where = scratch / f"{label}-{n}"
                report.setdefault(label, []).append(
                    one_round(where, source, client, args, f"{label}-{n}")
                )
                print(f"round {n + 1} of {label} done", file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print_summary(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
