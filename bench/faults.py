"""Replication fault bench: many rounds of faults on a three-broker cluster, checked like the
test suite's short version (tests/cluster/test_replication_faults.py), with its figures.

A real ZooKeeper and three brokers, each in a network namespace of its own (needs root; see
tests/cluster/faultkit.py). In one run:
- throughput: 100-byte messages, acks=1 to a replication-factor-1 topic and acks=all
  (idempotent) to a replication-factor-3 topic with min.insync.replicas=2, each with the
  CPU-seconds of all three brokers per million messages (from /proc);
- faults: `--rounds` rounds (default 50) chosen at random from the seed (printed): kill -9 of
  partition 0's leader, of one of its followers, of the controller; SIGSTOP past the ZooKeeper
  session timeout; a network partition of one broker for about ten seconds. Each is undone
  (restart on the same data, SIGCONT, heal) and followed by a bounded wait for a full ISR,
  while idempotent acks=all producers and a consumer group run. At the end everything is read
  back from the beginning and checked: lost, duplicated and divergent writes, offset gaps and
  disorder, seconds without a leader per fault kind, broker CPU per million acknowledged
  writes.

Writes JSON to bench/results/faults-<time>.json (or --out), prints the table, and exits 1 when
the checker found lost, duplicated or divergent writes (the cluster's files are then kept and
their place printed).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # waiting
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "cluster"))
import faultkit as fk

import faultbench

MB = 1e6


def produce_burst(
    cluster: fk.FaultCluster, topic: str, count: int, size: int, acks: str, time_limit: float
) -> dict[str, Any]:
    """`count` messages of `size` bytes round-robin over the topic's partitions as fast as one
    producer goes, and the CPU all brokers spent meanwhile. Stops early at `time_limit`."""
    idempotent = acks == "all"
    producer = Producer({
        "bootstrap.servers": cluster.bootstrap, "acks": acks, "enable.idempotence": idempotent,
        "linger.ms": 5, "batch.size": 1_000_000, "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_097_151, "log_level": fk.LIBRDKAFKA_LOG_LEVEL,
    })  # fmt: skip
    value = os.urandom(size // 2).hex().encode()[:size]
    failed = [0]

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failed[0] += 1

    cpu_before = {n: b.cpu_seconds() for n, b in cluster.brokers.items()}
    started = time.perf_counter()
    sent = 0
    for sent in range(1, count + 1):
        while True:
            try:
                producer.produce(topic, value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        if sent % 10_000 == 0 and time.perf_counter() - started > time_limit:
            break
    unanswered = producer.flush(120)
    fk.close_client(producer)
    seconds = time.perf_counter() - started
    cpu = {n: round(b.cpu_seconds() - cpu_before[n], 3) for n, b in cluster.brokers.items()}
    total = sum(cpu.values())
    return {
        "messages": sent,
        "message_bytes": size,
        "acks": acks,
        "idempotence": idempotent,
        "seconds": round(seconds, 3),
        "msgs_per_s": round(sent / seconds),
        "mb_per_s": round(sent * size / seconds / MB, 2),
        "broker_cpu_s": round(total, 3),
        "broker_cpu_s_by_node": cpu,
        "broker_cpu_s_per_million_msgs": round(total / sent * 1e6, 2),
        "failed": failed[0] + unanswered,
    }


def throughput(cluster: fk.FaultCluster, args: argparse.Namespace) -> dict[str, Any]:
    """acks=1 to replication factor 1 beside acks=all to replication factor 3, same cluster."""
    cluster.create_topic("bench-rf1", 3, 1)
    cluster.create_topic("bench-rf3", 3, 3, fk.TOPIC_CONFIG)
    rf1 = produce_burst(cluster, "bench-rf1", args.messages, 100, "1", args.phase_seconds)
    rf1["replication_factor"] = 1
    rf3 = produce_burst(cluster, "bench-rf3", args.messages, 100, "all", args.phase_seconds)
    rf3["replication_factor"] = 3
    rf3["broker_cpu_s_per_million_replica_appends"] = round(
        rf3["broker_cpu_s_per_million_msgs"] / 3, 2
    )
    return {
        "acks_1_rf1": rf1,
        "acks_all_rf3": rf3,
        "rf3_over_rf1_msgs_per_s": round(rf3["msgs_per_s"] / max(rf1["msgs_per_s"], 1), 3),
        "rf3_over_rf1_cpu_per_msg": round(
            rf3["broker_cpu_s_per_million_msgs"] / max(rf1["broker_cpu_s_per_million_msgs"], 1e-9),
            3,
        ),
    }


def run_faults(cluster: fk.FaultCluster, args: argparse.Namespace) -> dict[str, Any]:
    cpu_before = cluster.broker_cpu_seconds()
    outcome = fk.run_faults(
        cluster, "events", rounds=args.rounds, seed=args.seed, producers=args.producers,
        consumers=args.consumers, rate=args.rate, recover_timeout=args.recover_timeout,
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )  # fmt: skip
    cpu = cluster.broker_cpu_seconds() - cpu_before
    figures = fk.summary(outcome)
    figures["broker_cpu_s"] = round(cpu, 2)
    figures["broker_cpu_s_per_million_acked"] = round(cpu / max(figures["acked"], 1) * 1e6, 1)
    figures["examples"] = {
        "lost": outcome.verdict.lost,
        "duplicated": outcome.verdict.duplicated,
        "divergent": outcome.verdict.divergent,
        "gaps": outcome.verdict.gaps,
        "disorder": outcome.verdict.disorder,
    }
    figures["client_errors"] = dict(outcome.history.client_errors)
    figures["high_watermarks"] = outcome.ends
    figures["rounds_detail"] = [dataclasses.asdict(r) for r in outcome.records]
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--seed", type=int, default=None, help="default: a random one")
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--rate", type=float, default=200, help="msgs/s per producer")
    parser.add_argument("--recover-timeout", type=float, default=60,
                        help="seconds to wait for a full ISR after a fault")  # fmt: skip
    parser.add_argument("--messages", type=int, default=1_000_000, help="per throughput phase")
    parser.add_argument("--phase-seconds", type=float, default=60,
                        help="a throughput phase stops after this long")  # fmt: skip
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the cluster's files")
    parser.add_argument("--out", type=Path, default=None,
                        help="default bench/results/faults-<time>.json")  # fmt: skip
    args = parser.parse_args()
    if args.seed is None:
        args.seed = random.randrange(2**32)
    unavailable = faultbench.prepare("faults bench")
    if unavailable is not None:
        print(unavailable, file=sys.stderr)
        return 2
    out = faultbench.results_path(args.out, "faults")
    report: dict[str, Any] = {
        "benchmark": "faults",
        "machine": faultbench.machine(),
        "settings": {
            "seed": args.seed,
            "rounds": args.rounds,
            "producers": args.producers,
            "consumers": args.consumers,
            "rate_per_producer": args.rate,
            "recover_timeout_s": args.recover_timeout,
            "brokers": 3,
            "broker_config": fk.BROKER_CONFIG,
            "topic_config": fk.TOPIC_CONFIG,
            "producer": {
                k: v for k, v in fk.producer_config("").items() if k != "bootstrap.servers"
            },
            "network": "one namespace per broker, veth pairs into a bridge; a partition is the "
            "broker's bridge port down",
            "client": "confluent-kafka (librdkafka), in the root namespace",
        },
    }
    print(f"fault seed {args.seed}", file=sys.stderr, flush=True)

    def run(scratch: Path) -> bool:
        with fk.fault_cluster(scratch / "cluster") as cluster:
            if not args.skip_throughput:
                report["throughput"] = throughput(cluster, args)
            report["faults"] = run_faults(cluster, args)
        figures = report["faults"]
        return not (figures["lost"] or figures["duplicated"] or figures["divergent"])

    safe = faultbench.run_in_scratch(report, "weir-faults-", args.keep, run)
    faultbench.write_report(report, out, print_report)
    return 0 if safe else 1


def print_report(report: dict[str, Any]) -> None:
    if "throughput" in report:
        print(f"{'throughput':<14}{'msgs/s':>10}{'MB/s':>8}{'broker CPU-s/M msgs':>22}")
        for name in ("acks_1_rf1", "acks_all_rf3"):
            row = report["throughput"][name]
            print(f"{name:<14}{row['msgs_per_s']:>10}{row['mb_per_s']:>8}"
                  f"{row['broker_cpu_s_per_million_msgs']:>22}")  # fmt: skip
    print(fk.table(report["faults"]))
    faults = report["faults"]
    print(f"broker CPU-s per million acknowledged writes under faults: "
          f"{faults['broker_cpu_s_per_million_acked']}; not recovered in time: "
          f"{sum(r['not_recovered'] for r in faults['by_kind'].values())}; "
          f"run {report['seconds']}s")  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
