"""The chain's chaos test, long form (a skeleton: the chain ends at the topic today; the ETL into
the warehouse is its next hop): the schedule of tests/cluster/chainkit.py over `--rounds` rounds
(default 50; none starts after `--time-limit` seconds) against a real ZooKeeper and three
brokers on loopback. Each round the application sends events through `weir agent`
(exactly-once), the agent is killed with -9 and restarted, and a leader or the controller is
killed with -9 or a broker paused. At the end the checker reads the topic read_committed.

Prints and writes (bench/results/chain-<time>.json, or --out) the events answered, the events in
the topic, duplicates and missing, the faults, and events/s answered over the run; exits 1 when
the checker found an anomaly.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # waiting
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "cluster"))
from chainkit import BROKER_CONFIG, Chain
from cluster_brokers import BrokerSet, create_topics, start_three
from cluster_processes import start_zookeeper
from confluent_kafka.admin import AdminClient, NewTopic

import faultbench
from weir.cli.zookeeper import find_installation

PARTITIONS = 3
TOPIC = "chain"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--seed", type=int, default=None, help="default: a random one")
    parser.add_argument("--time-limit", type=float, default=1800,
                        help="no round starts after this many seconds")  # fmt: skip
    parser.add_argument("--out", type=Path, default=None,
                        help="default bench/results/chain-<time>.json")  # fmt: skip
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    print(f"chain: seed {seed}")
    with tempfile.TemporaryDirectory(prefix="weir-chain-") as scratch:
        directory = Path(scratch)
        zookeeper = start_zookeeper(directory / "zookeeper", find_installation())
        brokers = BrokerSet(directory / "brokers")
        try:
            cluster = start_three(brokers, zookeeper.connect, BROKER_CONFIG)
            admin = AdminClient({"bootstrap.servers": cluster[1].bootstrap, "log_level": 0})
            create_topics(admin, NewTopic(TOPIC, PARTITIONS, 3,
                                          config={"min.insync.replicas": "2"}))  # fmt: skip
            chain = Chain(cluster, directory, TOPIC, PARTITIONS, random.Random(seed))
            chain.rounds(args.rounds, args.time_limit)
            run = chain.check()
        finally:
            brokers.kill_all()
            zookeeper.stop()
    found = run.found
    assert found is not None
    report = {
        "seed": seed,
        "rounds": run.rounds,
        "faults": dict(run.faults),
        "batches_in_flight_at_an_agent_kill": dict(run.resumes),
        "seconds": round(run.seconds, 1),
        "answered_events_per_s": round(found.answered / run.seconds) if run.seconds else None,
        "checker": dataclasses.asdict(found),
        "machine": faultbench.machine(),
    }
    out = faultbench.results_path(args.out, "chain")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"chain: {run.summary()}; {report['answered_events_per_s']} answered events/s; "
          f"exactly once: {found.exactly_once}; {out}")  # fmt: skip
    return 0 if found.exactly_once else 1


if __name__ == "__main__":
    sys.exit(main())
