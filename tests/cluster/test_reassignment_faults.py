"""Partition moves with a fault landing mid-move, on three brokers each in a network namespace
of its own (faultkit.py, movekit.py): a topic of three partitions, replication factor 2 and
min.insync.replicas 2, under idempotent acks=all producers and a consumer group.

Four rounds, one of each kind in an order from the seed: the controller killed -9, the new
replica killed -9, the leaving leader killed -9, the move cancelled. Each move must settle
(complete, or back on its original replicas after the cancel) with every ISR full, and at the
end nothing acknowledged may be lost, duplicated or read differently by two readers, nor any
offset skipped or read out of order. The short version of bench/reassign_faults.py; set
WEIR_FAULT_SEED to replay the order of the kinds and the moves' random choices (the seed is
printed; which broker is the controller or leads varies from run to run).

Network namespaces need root (CI runs as root); without them the test is skipped locally and
fails in CI.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest
from faultkit import FaultCluster, fault_cluster
from movekit import MOVE_FAULT_KINDS, MoveOutcome, move_summary, move_table, run_move_faults

from weir.cli.zookeeper import Installation


@pytest.fixture
def cluster(tmp_path: Path, zookeeper_installation: Installation, netns: None
            ) -> Iterator[FaultCluster]:  # fmt: skip
    with fault_cluster(tmp_path / "cluster") as started:
        yield started


def assert_safe(outcome: MoveOutcome, cluster: FaultCluster) -> None:
    verdict = outcome.verdict
    logs = [str(b.log_path) for b in cluster.brokers.values()]
    where = f"seed {outcome.seed}; broker logs {logs}"
    assert verdict.acked > 0, f"nothing was acknowledged; {where}"
    assert verdict.lost == [], f"acknowledged writes lost; {where}"
    assert verdict.duplicated == [], f"values at two offsets; {where}"
    assert verdict.divergent == [], f"offsets read with two values; {where}"
    assert verdict.gaps == [], f"offsets skipped; {where}"
    assert verdict.disorder == [], f"offsets out of order; {where}"
    assert outcome.history.fatal == [], f"idempotent producers failed; {where}"


@pytest.mark.slow
def test_moves_survive_a_fault_of_each_kind_mid_move(cluster, tmp_path, figure):
    seed = int(os.environ.get("WEIR_FAULT_SEED", random.randrange(2**32)))
    outcome = run_move_faults(cluster, "moves", tmp_path / "plans", rounds=len(MOVE_FAULT_KINDS),
                              seed=seed, producers=2, consumers=2, rate=100,
                              settle_timeout=90)  # fmt: skip
    figures = move_summary(outcome)
    print("\n" + move_table(figures))
    for record in outcome.records:
        print(f"  {json.dumps(asdict(record))}")
    assert_safe(outcome, cluster)
    unsettled = [asdict(r) for r in outcome.records if not (r.started and r.settled)]
    assert unsettled == [], f"moves not settled in time; seed {seed}"
    for record in outcome.records:
        expected = "cancelled back" if record.kind == "cancel" else "moved"
        assert record.outcome == expected, asdict(record)
        figure(f"{record.kind} mid-move -> settled, ISR full", record.recovery_s)
    figure("records acknowledged", outcome.verdict.acked, "records")
