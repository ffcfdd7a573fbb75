"""Pending topics: held in order until the partition count is known, then placed by key;
dead-lettered when the topic does not exist; kept when a partition queue refuses them."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from weir.agent.deadletter import DeadLetters, read_dead_letters
from weir.agent.event import encode_record
from weir.agent.partitioner import StickyPartitioner, partition_for_key
from weir.agent.pending import PENDING_FILE, PendingRouter
from weir.agent.queue import DiskQueue, Durability, QueueFullError
from weir.agent.registry import MetadataUnavailable, UnknownTopicError
from weir.clock import FakeClock


class Cluster:
    """What the router learns about topics: nothing yet, a count, or that the topic is missing."""

    def __init__(self) -> None:
        self.counts: dict[str, int | None] = {}
        self.stored: dict[int, list[bytes]] = defaultdict(list)
        self.refuse = False

    def lookup(self, topic: str) -> int:
        count = self.counts.get(topic)
        if topic not in self.counts:
            raise MetadataUnavailable("cluster unreachable")
        if count is None:
            raise UnknownTopicError(f"topic {topic!r} does not exist")
        return count

    def store(self, topic: str, partition: int, payloads: list[bytes]) -> None:
        if self.refuse:
            raise QueueFullError("full")
        self.stored[partition] += payloads


def _router(tmp_path: Path, cluster: Cluster) -> PendingRouter:
    clock = FakeClock()

    def make_queue(path: Path, topic: str) -> DiskQueue:
        return DiskQueue(path, topic=topic, partition=-1, durability=Durability.LOGS,
                         capacity=1 << 20, clock=clock)  # fmt: skip

    return PendingRouter(tmp_path, make_queue=make_queue, lookup=cluster.lookup,
                         store=cluster.store, dead_letters=DeadLetters(tmp_path),
                         sticky=StickyPartitioner(), clock=clock)  # fmt: skip


def _payloads(count: int) -> list[bytes]:
    return [encode_record(1, b"key-%d" % (i % 7), b"%d" % i) for i in range(count)]


def test_events_wait_until_the_count_is_known_then_land_by_key_in_order(tmp_path: Path) -> None:
    cluster = Cluster()
    router = _router(tmp_path, cluster)
    payloads = _payloads(700)
    assert not router.append("t", payloads[:10], unknown=False), "a known topic is not held"
    for start in range(0, 700, 100):
        assert router.append("t", payloads[start : start + 100], unknown=start == 0)
    (pending,) = list(router._topics.values())
    router.resolve(pending)
    assert router.holds("t") and not cluster.stored
    cluster.counts["t"] = 5
    router.resolve(pending)
    assert not router.holds("t") and not (tmp_path / "t" / PENDING_FILE).exists()
    expected: dict[int, list[bytes]] = defaultdict(list)
    for i, payload in enumerate(payloads):
        expected[partition_for_key(b"key-%d" % (i % 7), 5)].append(payload)
    assert cluster.stored == expected
    assert not router.append("t", payloads[:1], unknown=False)


def test_a_refused_move_keeps_every_event_pending(tmp_path: Path) -> None:
    cluster = Cluster()
    cluster.counts["t"] = 3
    cluster.refuse = True
    router = _router(tmp_path, cluster)
    router.append("t", _payloads(50), unknown=True)
    (pending,) = list(router._topics.values())
    router.resolve(pending)
    assert router.holds("t") and pending.queue.state().depth == 50
    cluster.refuse = False
    router.resolve(pending)
    assert sum(map(len, cluster.stored.values())) == 50 and not router.holds("t")


def test_a_missing_topic_is_dead_lettered_once_and_forgotten(tmp_path: Path) -> None:
    cluster = Cluster()
    router = _router(tmp_path, cluster)
    router.append("gone", _payloads(30), unknown=True)
    cluster.counts["gone"] = None
    (pending,) = list(router._topics.values())
    router.resolve(pending)
    assert not router.holds("gone") and not cluster.stored
    assert router.dead_letters.counts() == {"gone": 30}
    events = read_dead_letters(router.dead_letters.path("gone"), "gone")
    assert [e.value for e in events] == [b"%d" % i for i in range(30)]


def test_pending_queues_left_in_the_spool_are_taken_up(tmp_path: Path) -> None:
    cluster = Cluster()
    router = _router(tmp_path, cluster)
    router.append("t", _payloads(20), unknown=True)
    router.stop(1)
    again = _router(tmp_path, cluster)
    again.open_existing()
    assert again.holds("t") and again.depth() == 20
    cluster.counts["t"] = 2
    again.resolve(next(iter(again._topics.values())))
    assert sum(map(len, cluster.stored.values())) == 20


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "x" * 250])
def test_topic_names_outside_kafkas_rule_are_refused(tmp_path: Path, name: str) -> None:
    from weir.agent.agent import _valid_topic

    assert not _valid_topic(name)
    assert _valid_topic("app.logs-1_x")
