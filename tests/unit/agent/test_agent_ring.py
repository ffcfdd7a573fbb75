"""The disk ring against a model: random append/peek/acknowledge/reopen/crash sequences."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from weir.agent.ring import DATA_START, RECORD_OVERHEAD, DiskRing, RingFull

CAPACITY = 512


class RingModel(RuleBasedStateMachine):
    """Model: the list of (sequence, payload) not yet acknowledged, plus the dropped count."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.TemporaryDirectory()
        self.path = Path(self.directory.name) / "q.ring"
        self.ring = DiskRing(self.path, CAPACITY)
        self.model: list[tuple[int, bytes]] = []
        self.next_sequence = 0
        self.dropped = 0
        self.pending = None

    def teardown(self) -> None:
        self.ring.close()
        self.directory.cleanup()

    def _used(self) -> int:
        return sum(RECORD_OVERHEAD + len(p) for _, p in self.model)

    @rule(
        payloads=st.lists(st.binary(max_size=60), min_size=1, max_size=4), overwrite=st.booleans()
    )
    def append(self, payloads: list[bytes], overwrite: bool) -> None:
        needed = sum(RECORD_OVERHEAD + len(p) for p in payloads)
        if not overwrite and self._used() + needed > CAPACITY:
            with pytest.raises(RingFull):
                self.ring.append(payloads, overwrite=False)
            return
        evicted = self.ring.append(payloads, overwrite=overwrite)
        expected = 0
        while self._used() + needed > CAPACITY:
            self.model.pop(0)
            expected += 1
        assert evicted == expected
        self.dropped += evicted
        for payload in payloads:
            self.model.append((self.next_sequence, payload))
            self.next_sequence += 1

    @rule(limit=st.integers(1, 10))
    def peek(self, limit: int) -> None:
        batch = self.ring.peek(limit, 1 << 20)
        assert batch.payloads == [p for _, p in self.model[:limit]]
        if self.model:
            assert batch.first_sequence == self.model[0][0]
        self.pending = (batch, [s for s, _ in self.model[:limit]])

    @precondition(lambda self: self.pending is not None)
    @rule()
    def acknowledge(self) -> None:
        batch, _ = self.pending
        self.ring.acknowledge(batch)
        self.model = [(s, p) for s, p in self.model if s >= batch.end_sequence]
        self.pending = None

    @rule()
    def reopen(self) -> None:
        self.ring.close()
        self.ring = DiskRing(self.path, CAPACITY)
        self.pending = None

    @rule(garbage=st.binary(min_size=1, max_size=16))
    def crash_with_torn_tail(self, garbage: bytes) -> None:
        """kill -9 while writing the next record: bytes after the write position are junk."""
        state = self.ring.state()
        self.ring.close()
        with open(self.path, "r+b") as f:
            offset = state.write_position % CAPACITY
            room = min(len(garbage), CAPACITY - offset, CAPACITY - state.used_bytes)
            f.seek(DATA_START + offset)
            f.write(garbage[:room])
        self.ring = DiskRing(self.path, CAPACITY)
        self.pending = None

    @invariant()
    def state_matches(self) -> None:
        state = self.ring.state()
        assert state.depth == len(self.model)
        assert state.used_bytes == self._used()
        assert state.dropped == self.dropped


TestRingModel = RingModel.TestCase
TestRingModel.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


def test_recovery_finds_last_complete_record_when_header_is_stale(tmp_path: Path) -> None:
    path = tmp_path / "q.ring"
    ring = DiskRing(path, 4096)
    ring.append([b"one", b"two"], overwrite=False)
    header = ring._map[:DATA_START]
    ring.append([b"three"], overwrite=False)
    ring._map[:DATA_START] = header
    ring.close()
    reopened = DiskRing(path, 4096)
    assert reopened.peek(10, 1 << 20).payloads == [b"one", b"two", b"three"]
    reopened.close()


def test_recovery_stops_at_a_torn_record(tmp_path: Path) -> None:
    path = tmp_path / "q.ring"
    ring = DiskRing(path, 4096)
    ring.append([b"kept", b"torn-record"], overwrite=False)
    ring._map[DATA_START + RECORD_OVERHEAD + 4 + RECORD_OVERHEAD + 2] ^= 0xFF
    ring.close()
    reopened = DiskRing(path, 4096)
    assert reopened.peek(10, 1 << 20).payloads == [b"kept"]
    reopened.close()


def test_overwrite_counts_exactly_what_it_dropped(tmp_path: Path) -> None:
    ring = DiskRing(tmp_path / "q.ring", 10 * (RECORD_OVERHEAD + 4))
    for i in range(25):
        ring.append([b"%04d" % i], overwrite=True)
    assert ring.state().dropped == 15
    assert ring.peek(100, 1 << 20).payloads == [b"%04d" % i for i in range(15, 25)]
    ring.close()


def test_peek_takes_a_record_larger_than_its_byte_limit_alone_and_across_the_wrap(
    tmp_path: Path,
) -> None:
    ring = DiskRing(tmp_path / "big.ring", 300_000)
    small, big = b"s" * 100, bytes(range(256)) * 800
    ring.append([small] * 900, overwrite=False)
    ring.acknowledge(ring.peek(900, 1 << 20))
    assert ring.state().write_position + RECORD_OVERHEAD + len(big) > ring.capacity
    ring.append([big, small], overwrite=False)  # the big record wraps around the end
    first = ring.peek(10, 1000)
    assert first.payloads == [big]
    ring.acknowledge(first)
    assert ring.peek(10, 1000).payloads == [small]
    ring.close()


def test_stored_fields_decode_as_the_event_does() -> None:
    from weir.agent.event import Event, decode_fields, encode_event

    for event in (
        Event(topic="t", value=b"v", key=b"k", timestamp_ms=5),
        Event(topic="t", value=None, key=b"", timestamp_ms=6),
        Event(topic="t", value=b"", headers=[("h", b"1"), ("i", b"")], timestamp_ms=7),
    ):
        assert decode_fields(encode_event(event)) == (
            event.timestamp_ms, event.key, event.value, event.headers
        )
