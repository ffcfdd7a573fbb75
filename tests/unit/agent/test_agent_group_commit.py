"""Group commit of the `events` class: callers share flushes, and none is answered early."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from weir.agent.event import decode_event, encode_unkeyed
from weir.agent.queue import DiskQueue, Durability, GroupCommit
from weir.agent.ring import DiskRing
from weir.clock import FakeClock

CALLERS = 16
PER_CALLER = 40


def _run_callers(target: Callable[[int], None]) -> None:
    threads = [threading.Thread(target=target, args=(n,)) for n in range(CALLERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_concurrent_callers_share_flushes(tmp_path: Path) -> None:
    queue = DiskQueue(
        tmp_path / "0.ring",
        topic="t",
        partition=0,
        durability=Durability.EVENTS,
        capacity=1 << 20,
        clock=FakeClock(),
        group_commit_ms=5,
    )

    def caller(n: int) -> None:
        for i in range(PER_CALLER):
            queue.append([b"%d-%d" % (n, i)])

    _run_callers(caller)
    events = CALLERS * PER_CALLER
    assert queue.state().depth == events
    assert 0 < queue.flushes <= events // 4
    queue.close()


def test_every_answer_follows_a_flush_that_covered_its_record(tmp_path: Path) -> None:
    ring = DiskRing(tmp_path / "0.ring", 1 << 20)
    durable_through = [0]

    def flush() -> None:
        started_with = ring.state().write_sequence
        ring.flush()
        durable_through[0] = max(durable_through[0], started_with)

    commit = GroupCommit(flush, window_ms=1)
    answered: dict[bytes, int] = {}

    def caller(n: int) -> None:
        for i in range(PER_CALLER):
            payload = b"%d-%d" % (n, i)
            commit.begin()
            ring.append([payload], overwrite=False)
            commit.wait_durable(commit.end(appended=True))
            answered[payload] = durable_through[0]

    _run_callers(caller)
    stored = ring.peek(CALLERS * PER_CALLER, 1 << 30)
    sequence_of = {p: stored.first_sequence + i for i, p in enumerate(stored.payloads)}
    assert len(answered) == CALLERS * PER_CALLER
    for payload, durable in answered.items():
        assert durable > sequence_of[payload], payload
    assert commit.flushes < CALLERS * PER_CALLER
    ring.close()


def test_a_failed_flush_answers_nobody_and_the_next_one_does(tmp_path: Path) -> None:
    ring = DiskRing(tmp_path / "0.ring", 1 << 20)
    failures = [1]

    def flush() -> None:
        # A device error cannot be provoked on a healthy file system; the first flush fails.
        if failures[0]:
            failures[0] -= 1
            raise OSError("EIO")
        ring.flush()

    commit = GroupCommit(flush, window_ms=0)
    commit.begin()
    ring.append([b"a"], overwrite=False)
    ticket = commit.end(appended=True)
    with pytest.raises(OSError, match="EIO"):
        commit.wait_durable(ticket)
    commit.wait_durable(ticket)
    assert commit.flushes == 1
    ring.close()


def test_unkeyed_batch_encoding_round_trips() -> None:
    values = [b"a", None, b"", b"x" * 300]
    events = [decode_event("t", p) for p in encode_unkeyed(42, values)]
    assert [e.value for e in events] == values
    assert {(e.key, e.timestamp_ms, tuple(e.headers)) for e in events} == {(None, 42, ())}
