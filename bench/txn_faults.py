"""Transaction fault bench: the Jepsen-style transaction check of tests/cluster/
test_cluster_txn_faults.py over many rounds, with its figures.

A real ZooKeeper and three brokers, each in a network namespace of its own (needs root; see
tests/cluster/faultkit.py). A transactional writer (confluent-kafka) puts two records on each of
three partitions (replication factor 3, min.insync.replicas 2) per transaction and aborts every
fourth on purpose. It first runs `--quiet-seconds` without faults (the baseline commit rate),
then through `--rounds` rounds (default 20; none starts after `--time-limit` seconds), each a
kill -9 of the broker coordinating its transactional id or of a partition's leader, chosen at
random from the seed (printed), followed by a restart on the same data and a bounded wait for a
full ISR. At the end a read_committed reader reads everything and the checker of
tests/cluster/txnkit.py counts lost committed writes, aborted reads, torn transactions and
duplicates.

Writes JSON to bench/results/txn-faults-<time>.json (or --out), prints a summary, and exits 1
when the checker found an anomaly (the cluster's files are then kept and their place printed).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # waiting
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "cluster"))
import faultkit as fk
import txnkit

import faultbench

#: broker settings beyond faultkit's: fewer transaction state partitions (three brokers), and
#: timed-out transactions looked for every 2 s rather than 10 s
BROKER_CONFIG: dict[str, object] = {
    "transaction.state.log.num.partitions": 3,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 2000,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=None, help="default: a random one")
    parser.add_argument("--time-limit", type=float, default=600,
                        help="no round starts after this many seconds")  # fmt: skip
    parser.add_argument("--quiet-seconds", type=float, default=15,
                        help="writing without faults first (baseline)")  # fmt: skip
    parser.add_argument("--recover-timeout", type=float, default=60,
                        help="seconds to wait for a full ISR after a fault")  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the cluster's files")
    parser.add_argument("--out", type=Path, default=None,
                        help="default bench/results/txn-faults-<time>.json")  # fmt: skip
    args = parser.parse_args()
    if args.seed is None:
        args.seed = random.randrange(2**32)
    unavailable = faultbench.prepare("transaction fault bench")
    if unavailable is not None:
        print(unavailable, file=sys.stderr)
        return 2
    out = faultbench.results_path(args.out, "txn-faults")
    report: dict[str, Any] = {
        "benchmark": "txn_faults",
        "machine": faultbench.machine(),
        "settings": {
            "seed": args.seed,
            "rounds": args.rounds,
            "time_limit_s": args.time_limit,
            "quiet_s": args.quiet_seconds,
            "recover_timeout_s": args.recover_timeout,
            "brokers": 3,
            "broker_config": {**fk.BROKER_CONFIG, **BROKER_CONFIG},
            "topic_config": fk.TOPIC_CONFIG,
            "partitions": txnkit.PARTITIONS,
            "records_per_partition_per_transaction": txnkit.PER_PARTITION,
            "fault_kinds": list(txnkit.TXN_FAULT_KINDS),
            "client": "confluent-kafka (librdkafka) transactional producer and read_committed "
            "consumer, in the root namespace",
        },
    }

    def run(scratch: Path) -> bool:
        with fk.fault_cluster(scratch / "cluster", config=BROKER_CONFIG) as cluster:
            outcome = txnkit.run_txn_faults(
                cluster, "txn-faults", rounds=args.rounds, seed=args.seed,
                time_limit_s=args.time_limit, recover_timeout=args.recover_timeout,
                quiet_s=args.quiet_seconds,
                log=lambda line: print(line, file=sys.stderr, flush=True),
            )  # fmt: skip
        report["transactions"] = outcome.summary()
        return outcome.ok

    safe = faultbench.run_in_scratch(report, "weir-txn-faults-", args.keep, run)
    faultbench.write_report(report, out, print_report)
    return 0 if safe else 1


def print_report(report: dict[str, Any]) -> None:
    figures = report["transactions"]
    rounds = figures["rounds"]
    recovery = [r["seconds"] for r in rounds]
    print(f"seed {figures['seed']}  rounds {len(rounds)} {figures['faults']}  not recovered "
          f"{figures['not_recovered']}  ({report['seconds']}s)")  # fmt: skip
    print(f"transactions: committed {figures['committed']}, aborted {figures['aborted']}, "
          f"unknown outcome {figures['unknown']}; records read "
          f"{figures['values_read']}")  # fmt: skip
    print(f"anomalies: {figures['anomalies']}")
    mean = sum(recovery) / max(len(recovery), 1)
    print(f"commits/s without faults {figures['quiet_commits_per_s']}, over the whole run "
          f"{figures['commits_per_s']}; recovery s mean {mean:.1f} max "
          f"{max(recovery, default=0):.1f}")  # fmt: skip
    print(f"client errors: {figures['client_errors']}")


if __name__ == "__main__":
    raise SystemExit(main())
