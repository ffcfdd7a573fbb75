"""Replica placement benchmark: data moved when a broker joins, and load skew, per strategy.

For each cluster size n (default 3, 5, 10, 20 rack-less brokers of weight 1) it places one topic
(default 1,000 partitions, replication factor 3) on n and on n + 1 brokers with both strategies
of `weir.cluster.placement`, and reports:
- moved: the fraction of replicas that must be copied (new replica-set members), beside the
  1/(n+1) that a perfectly incremental placement would move; for the consistent-hash ring also
  the fraction of those moves that land on the new broker;
- skew: max / mean replicas per broker on n brokers (1.0 is perfectly even);
- the time each placement takes.
Kafka's assignment runs with start index 0 on both cluster sizes, its most stable case.
A second table places the topic on 12 brokers in racks of 4, 3, 2, 2 and 1 machines: Kafka's
rack-aware assignment, the ring with its rack rule, and the ring over 3 virtual rack groups.

Prints JSON; with --out, also writes it there.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from weir.cluster.placement import (
    DEFAULT_VNODES,
    Assignment,
    BrokerSpec,
    consistent_hash_assignment,
    kafka_assignment,
    replicas_moved,
)

TOPIC = "bench"
UNEVEN_RACKS = {"rack-a": 4, "rack-b": 3, "rack-c": 2, "rack-d": 2, "rack-e": 1}


def skew(assignment: Assignment, brokers: list[BrokerSpec]) -> float:
    counts = Counter(node for replicas in assignment.values() for node in replicas)
    mean = sum(counts.values()) / len(brokers)
    return round(max(counts.values()) / mean, 3)


def timed(
    place: Callable[[list[BrokerSpec]], Assignment], brokers: list[BrokerSpec]
) -> tuple[Assignment, float]:
    started = time.perf_counter()
    assignment = place(brokers)
    return assignment, round((time.perf_counter() - started) * 1000, 2)


def growth(
    n: int, place: Callable[[list[BrokerSpec]], Assignment], replicas: int
) -> dict[str, Any]:
    before = [BrokerSpec(node) for node in range(n)]
    after = [*before, BrokerSpec(n)]
    old, millis = timed(place, before)
    new, _ = timed(place, after)
    moved = replicas_moved(old, new)
    onto_new = sum(1 for members in new.values() if n in members)
    return {
        "moved_fraction": round(moved / replicas, 4),
        "moved_onto_new_broker": round(onto_new / moved, 4) if moved else None,
        "skew_max_over_mean": skew(old, before),
        "place_ms": millis,
    }


def uneven_racks(partitions: int, rf: int, vnodes: int) -> dict[str, Any]:
    brokers = [
        BrokerSpec(node, rack)
        for node, rack in enumerate(r for r, size in UNEVEN_RACKS.items() for _ in range(size))
    ]
    placements = {
        "kafka_rack_aware": kafka_assignment(brokers, partitions, rf, start_index=0),
        "consistent_hash_racks": consistent_hash_assignment(
            brokers, TOPIC, partitions, rf, vnodes=vnodes
        ),
        "consistent_hash_3_rack_groups": consistent_hash_assignment(
            brokers, TOPIC, partitions, rf, vnodes=vnodes, rack_groups=3
        ),
    }
    return {
        "rack_sizes": UNEVEN_RACKS,
        "skew_max_over_mean": {name: skew(a, brokers) for name, a in placements.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--brokers", type=int, nargs="+", default=[3, 5, 10, 20])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--replication-factor", type=int, default=3)
    parser.add_argument("--vnodes", type=int, default=DEFAULT_VNODES, help="per unit of weight")
    parser.add_argument("--out", "--output", type=Path, default=None)
    args = parser.parse_args()
    partitions, rf, vnodes = args.partitions, args.replication_factor, args.vnodes
    replicas = partitions * rf

    def hashed(brokers: list[BrokerSpec]) -> Assignment:
        return consistent_hash_assignment(brokers, TOPIC, partitions, rf, vnodes=vnodes)

    def dealt(brokers: list[BrokerSpec]) -> Assignment:
        return kafka_assignment(brokers, partitions, rf, start_index=0)

    report: dict[str, Any] = {
        "benchmark": "placement",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "settings": {
            "partitions": partitions,
            "replication_factor": rf,
            "vnodes_per_weight": vnodes,
            "kafka_start_index": 0,
        },
        "results": {
            "add_one_broker": {
                str(n): {
                    "ideal_moved_fraction": round(1 / (n + 1), 4),
                    "consistent_hash": growth(n, hashed, replicas),
                    "kafka": growth(n, dealt, replicas),
                }
                for n in args.brokers
            },
            "uneven_racks": uneven_racks(partitions, rf, vnodes),
        },
    }
    text = json.dumps(report, indent=2)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
