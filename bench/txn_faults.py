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
import faulthandler
import json
import logging
import os
import platform
import random
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "cluster"))
import faultkit as fk
import txnkit

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
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1: where is it stuck?
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that clean-up runs
    reason = fk.netns_unavailable()
    if reason is not None:
        print(f"transaction fault bench: {reason}", file=sys.stderr)
        return 2
    stamp = time.strftime("%Y%m%dT%H%M%S")
    out = args.out or Path(__file__).parent / "results" / f"txn-faults-{stamp}.json"
    report: dict[str, Any] = {
        "benchmark": "txn_faults",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "kernel": platform.release(),
        },
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
    scratch = Path(tempfile.mkdtemp(prefix="weir-txn-faults-"))
    started = time.monotonic()
    safe = False
    try:
        with fk.fault_cluster(scratch / "cluster", config=BROKER_CONFIG) as cluster:
            run = txnkit.run_txn_faults(
                cluster, "txn-faults", rounds=args.rounds, seed=args.seed,
                time_limit_s=args.time_limit, recover_timeout=args.recover_timeout,
                quiet_s=args.quiet_seconds,
                log=lambda line: print(line, file=sys.stderr, flush=True),
            )  # fmt: skip
        report["transactions"] = run.summary()
        safe = run.ok
    finally:
        report["seconds"] = round(time.monotonic() - started, 1)
        if safe and not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            report["kept_files"] = str(scratch)
            print(f"cluster files kept in {scratch}", file=sys.stderr)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print_report(report)
    print(f"written to {out}")
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
