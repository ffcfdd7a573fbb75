"""Reassignment fault bench: partition moves with a fault landing mid-move, many rounds, checked
like the replication fault bench (faults.py), with the time each move took to settle.

A real ZooKeeper and three brokers, each in a network namespace of its own (needs root; see
tests/cluster/faultkit.py). A topic of three partitions, replication factor 2 and
`--min-isr` (default 2: a write acknowledged with acks=all is on both replicas; one replica
down then holds that partition's writes back until it returns). Each of `--rounds` rounds
(default 20) moves one partition, one replica to the broker without one, with that broker
paused so that the move stays under way, and lands one fault on it, chosen at random from the
seed (printed): kill -9 of the controller, of the new replica, or of the partition's leader
that is leaving, or a cancel of the move (tests/cluster/movekit.py). The fault is undone and
the round waits (`--settle-timeout`) until the move is complete (a cancel: back on the original
replicas) and every ISR is full, while idempotent acks=all producers and a consumer group run.
At the end everything is read back from the beginning and checked: lost, duplicated and
divergent writes, offset gaps and disorder.

Writes JSON to bench/results/reassign-faults-<time>.json (or --out), prints the table (rounds,
moves settled and seconds per fault kind), and exits 1 when the checker found an anomaly (the
cluster's files are then kept and their place printed).
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # waiting
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "cluster"))
import faultkit as fk
import movekit

import faultbench


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=None, help="default: a random one")
    parser.add_argument("--min-isr", type=int, choices=(1, 2), default=2,
                        help="the topic's min.insync.replicas (replication factor 2)")  # fmt: skip
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--rate", type=float, default=100, help="msgs/s per producer")
    parser.add_argument("--settle-timeout", type=float, default=90,
                        help="seconds to wait for a move to settle and a full ISR")  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the cluster's files")
    parser.add_argument("--out", type=Path, default=None,
                        help="default bench/results/reassign-faults-<time>.json")  # fmt: skip
    args = parser.parse_args()
    if args.seed is None:
        args.seed = random.randrange(2**32)
    unavailable = faultbench.prepare("reassignment fault bench")
    if unavailable is not None:
        print(unavailable, file=sys.stderr)
        return 2
    out = faultbench.results_path(args.out, "reassign-faults")
    report: dict[str, Any] = {
        "benchmark": "reassign_faults",
        "machine": faultbench.machine(),
        "settings": {
            "seed": args.seed,
            "rounds": args.rounds,
            "producers": args.producers,
            "consumers": args.consumers,
            "rate_per_producer": args.rate,
            "settle_timeout_s": args.settle_timeout,
            "brokers": 3,
            "partitions": 3,
            "replication_factor": movekit.REPLICATION_FACTOR,
            "min_insync_replicas": args.min_isr,
            "broker_config": fk.BROKER_CONFIG,
            "fault_kinds": list(movekit.MOVE_FAULT_KINDS),
            "producer": {
                k: v for k, v in fk.producer_config("").items() if k != "bootstrap.servers"
            },
            "moves": "`weir reassign execute|cancel` with a bootstrap list of live brokers; the "
            "new replica paused (SIGSTOP) from before execute until the fault is undone",
            "client": "confluent-kafka (librdkafka), in the root namespace",
        },
    }
    print(f"move fault seed {args.seed}", file=sys.stderr, flush=True)

    def run(scratch: Path) -> bool:
        with fk.fault_cluster(scratch / "cluster") as cluster:
            outcome = movekit.run_move_faults(
                cluster, "moves", scratch / "plans", rounds=args.rounds, seed=args.seed,
                min_insync_replicas=args.min_isr, producers=args.producers,
                consumers=args.consumers, rate=args.rate, settle_timeout=args.settle_timeout,
                log=lambda line: print(line, file=sys.stderr, flush=True),
            )  # fmt: skip
        report["moves"] = figures(outcome)
        return outcome.ok

    safe = faultbench.run_in_scratch(report, "weir-reassign-faults-", args.keep, run)
    faultbench.write_report(report, out, print_report)
    return 0 if safe else 1


def figures(outcome: movekit.MoveOutcome) -> dict[str, Any]:
    found = movekit.move_summary(outcome)
    found["examples"] = {
        "lost": outcome.verdict.lost,
        "duplicated": outcome.verdict.duplicated,
        "divergent": outcome.verdict.divergent,
        "gaps": outcome.verdict.gaps,
        "disorder": outcome.verdict.disorder,
    }
    found["client_errors"] = dict(outcome.history.client_errors)
    found["high_watermarks"] = outcome.ends
    found["rounds_detail"] = [dataclasses.asdict(r) for r in outcome.records]
    return found


def print_report(report: dict[str, Any]) -> None:
    if "moves" not in report:
        print(f"no figures: the run failed after {report['seconds']}s")
        return
    moves = report["moves"]
    print(movekit.move_table(moves))
    print("move s: execute until settled (complete, or cancelled back) with every ISR full; "
          "after fault s: from the fault; leaderless s: seconds some partition had no running, "
          "unpaused leader, summed over the rounds")  # fmt: skip
    print(f"not settled in time: {moves['not_settled']}; fatal producer errors: "
          f"{len(moves['fatal_producer_errors'])}; run {report['seconds']}s")  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
