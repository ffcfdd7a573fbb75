"""A disk that stalls instead of failing: every fdatasync of one partition's segments waits three
seconds (`WEIR_DISK_FAULTS` with a `delay=` rule on that partition's directory, see
`weir.diskio`), in a real broker process driven by confluent-kafka producers.

The stalled partition has `flush.messages=1`, so each acks=all produce to it waits for its sync.
Meanwhile produces to another partition keep completing promptly: the event loop never waits
on a disk (docs/threads.md), and the stalled partition's own acknowledgement still comes only
after its records are on disk."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from brokerkit import AckedProducer, BrokerProcess, check_all, create_topic

FAULTS = "WEIR_DISK_FAULTS"
STALL_S = 3.0
#: a round trip on an idle loopback broker is a few milliseconds; a loop stuck behind the
#: stalled sync takes seconds
PROMPT_S = 0.5


def round_trip(producer: AckedProducer) -> float:
    start = time.monotonic()
    assert len(producer.produce(1, timeout=30)) == 1, producer.failed
    return time.monotonic() - start


@pytest.mark.slow
def test_a_stalled_fsync_on_one_partition_does_not_hold_up_another(
    tmp_path: Path, figure: Callable[..., None]
) -> None:
    data_dir = tmp_path / "broker"
    stalled = f"segment:sync:1+:delay={int(STALL_S * 1000)}:{data_dir / 'slow-0'}"
    broker = BrokerProcess(data_dir, env={FAULTS: stalled})
    try:
        broker.start()
        create_topic(broker.bootstrap, "slow", **{"flush.messages": "1"})
        create_topic(broker.bootstrap, "fast")
        fast = AckedProducer(broker.bootstrap, "fast")
        slow = AckedProducer(broker.bootstrap, "slow", message_timeout_ms=30_000, next_seq=10**6)
        round_trip(fast)  # connected, metadata known
        slow.producer.list_topics("slow", timeout=30)

        sent = time.monotonic()
        slow.send(1)
        slow.producer.poll(0.2)  # the batch is on its way, its sync begins
        trips = []
        while time.monotonic() - sent < STALL_S - 0.5:
            trips.append(round_trip(fast))
        assert slow.pending == 1, "the stalled partition acknowledged before its sync ended"
        slow.flush()
        acked_after = time.monotonic() - sent

        figure("longest produce round trip to another partition during the stall", max(trips))
        figure("median produce round trip to another partition during the stall",
               statistics.median(trips))  # fmt: skip
        figure("produce round trips to another partition during the stall", len(trips),
               "requests")  # fmt: skip
        figure("acks=all produce to the stalled partition acknowledged after", acked_after)
        assert max(trips) < PROMPT_S, f"a produce to another partition took {max(trips):.3f}s"
        assert acked_after >= STALL_S, "acknowledged before its fdatasync returned"
        assert len(slow.acked) == 1
        check_all(broker.bootstrap, "fast", fast.acked)
        check_all(broker.bootstrap, "slow", slow.acked)
    finally:
        if broker.process is not None:
            broker.kill()
