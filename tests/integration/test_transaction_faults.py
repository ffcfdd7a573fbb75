"""Transactions checked in the spirit of Jepsen's Kafka workload while the broker is killed with
-9 and restarted under a transactional writer, round after round. The writer, the reader and
the checker (no lost committed write, no aborted read, no torn transaction, no duplicate) are
tests/cluster/txnkit.py's, shared with the three-broker version and the bench.
"""

from __future__ import annotations

import random
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cluster"))
from txnkit import (
    PARTITIONS,
    PER_PARTITION,
    TIMEOUT,
    Outcomes,
    TransactionalWriter,
    check,
    read_committed,
)

BrokerFactory = Callable[..., BrokerProcess]


@pytest.mark.slow
def test_killed_broker_never_shows_a_torn_lost_or_aborted_transaction(broker_factory):
    broker = broker_factory("txn-faults", **{"group.initial.rebalance.delay.ms": 0})
    topic = f"jepsen-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS)])[topic].result(TIMEOUT)
    writer = TransactionalWriter(broker.bootstrap, topic)
    writer.start()
    rng = random.Random(20261125)
    for _ in range(6):
        time.sleep(rng.uniform(1.0, 3.0))
        broker.kill()
        time.sleep(rng.uniform(0.0, 1.0))
        broker.start()
    time.sleep(3)
    writer.stopping.set()
    writer.join(3 * TIMEOUT)
    outcomes = writer.outcomes
    anomalies = check(outcomes, read_committed(broker.bootstrap, topic))
    summary = (f"committed {len(outcomes.committed)}, aborted {len(outcomes.aborted)}, unknown "
               f"{len(outcomes.unknown)}; client errors {dict(writer.errors)}")  # fmt: skip
    print(summary)
    assert len(outcomes.committed) > 20, summary
    assert anomalies == {"duplicated": [], "lost": [], "aborted_read": [], "torn": []}, summary


def test_the_checker_finds_each_anomaly():
    outcomes = Outcomes(committed={1, 2}, aborted={3}, unknown={4})
    whole = [f"{t}-{p}-{i}"
             for t in (1, 2) for p in range(PARTITIONS) for i in range(PER_PARTITION)]  # fmt: skip
    assert check(outcomes, whole) == {"duplicated": [], "lost": [], "aborted_read": [], "torn": []}
    broken = [*whole[1:], whole[2], "3-0-0", "4-1-1"]
    assert check(outcomes, broken) == {
        "duplicated": [1], "lost": [1], "aborted_read": [3], "torn": [1, 3, 4],
    }  # fmt: skip
