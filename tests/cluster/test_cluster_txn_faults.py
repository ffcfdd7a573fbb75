"""Transactions on three brokers (replication factor 3, min.insync.replicas 2) while the broker
coordinating the writer's transactions and a partition leader are killed with -9 and restarted:
a read_committed reader afterwards finds no lost committed write, no aborted read, no torn
transaction and no duplicate (tests/cluster/txnkit.py). The brokers run in network namespaces
(faultkit.py; root needed, as CI has). bench/txn_faults.py runs many more rounds. Set
WEIR_FAULT_SEED to replay a run; the seed is printed."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from faultkit import FaultCluster, fault_cluster
from txnkit import run_txn_faults

from weir.cli.zookeeper import Installation

CONFIG: dict[str, object] = {
    "transaction.state.log.num.partitions": 3,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 2000,
}


@pytest.fixture
def cluster(
    tmp_path: Path, zookeeper_installation: Installation, netns: None
) -> Iterator[FaultCluster]:
    with fault_cluster(tmp_path / "cluster", config=CONFIG) as started:
        yield started


@pytest.mark.slow
def test_killing_the_coordinator_and_a_leader_never_tears_a_transaction(cluster, figure):
    seed = int(os.environ.get("WEIR_FAULT_SEED", random.randrange(2**32)))
    run = run_txn_faults(cluster, "jepsen-txn", rounds=2, seed=seed, time_limit_s=40)
    summary = run.summary()
    print(summary)
    figure("committed transactions", summary["committed"], "")
    assert {r.kind for r in run.rounds} == {"kill_coordinator", "kill_leader"}, summary
    assert all(r.recovered for r in run.rounds), summary
    assert summary["committed"] >= 3, summary  # a loaded machine commits few; none is a failure
    assert run.ok, summary
