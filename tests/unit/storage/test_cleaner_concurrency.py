"""The cleaner holds a partition's lock only to choose segments and to swap: a pass held in the
middle (an injected pause, not a timing) lets appends and reads on the same and other partitions
complete, and a log deleted under a pass loses nothing of the pass's making."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from storage_helpers import all_values, batch

from weir.clock import FakeClock, FakeScheduler
from weir.storage import LogConfig, LogManager, LogManagerConfig, PartitionLog
from weir.storage.cleaner import LogCleaner

COMPACT = LogConfig(segment_bytes=800, index_interval_bytes=100, cleanup_policy=("compact",),
                    retention_ms=-1, min_cleanable_dirty_ratio=0.0)  # fmt: skip
WAIT_S = 10


class HeldPass:
    """A cleaner whose pass stops before its first swap until `release()`."""

    def __init__(self, clock: FakeClock) -> None:
        self.entered = threading.Event()
        self._release = threading.Event()
        self.cleaner = LogCleaner(clock, before_swap=self._hold)
        self.result: list[object] = []
        self._thread: threading.Thread | None = None

    def _hold(self, _log: PartitionLog) -> None:
        self.entered.set()
        assert self._release.wait(WAIT_S), "the test never released the pass"

    def start(self, log: PartitionLog) -> None:
        def run() -> None:
            try:
                self.result.append(self.cleaner.clean(log))
            except Exception as exc:  # reported to the test
                self.result.append(exc)

        self._thread = threading.Thread(target=run)
        self._thread.start()
        assert self.entered.wait(WAIT_S), "the pass never reached its swap"

    def release(self) -> object:
        self._release.set()
        assert self._thread is not None
        self._thread.join(WAIT_S)
        assert not self._thread.is_alive()
        return self.result[0]


def completes(action: Callable[[], object]) -> object:
    """Run `action` on another thread; it must finish while the pass is held."""
    out: list[object] = []
    worker = threading.Thread(target=lambda: out.append(action()))
    worker.start()
    worker.join(WAIT_S)
    assert not worker.is_alive(), "blocked behind the held cleaner"
    return out[0]


@pytest.fixture
def manager(tmp_path: Path, clock: FakeClock) -> Iterator[LogManager]:
    logs = LogManager(tmp_path, COMPACT, clock, FakeScheduler(clock), LogManagerConfig())
    yield logs
    logs.close()


def fill(log: PartitionLog, clock: FakeClock, count: int, keys: int) -> dict[bytes, bytes]:
    latest = {}
    for i in range(count):
        key, value = b"k%d" % (i % keys), b"v%d-" % i + b"x" * 30
        log.append(batch([value], timestamp=clock.milliseconds(), keys=[key]), leader_epoch=0)
        latest[key] = value
    return latest


def test_appends_and_reads_go_on_while_a_pass_is_held(
    manager: LogManager, clock: FakeClock
) -> None:
    log, other = manager.get_or_create("c", 0), manager.get_or_create("c", 1)
    latest = fill(log, clock, 200, 10)
    log.roll()
    held = HeldPass(clock)
    held.start(log)
    end = log.log_end_offset
    info = completes(lambda: log.append(batch([b"during"], keys=[b"k1"]), leader_epoch=0))
    assert info.first_offset == end  # type: ignore[attr-defined]
    assert completes(lambda: len(all_values(log))) == end + 1
    completes(lambda: other.append(batch([b"elsewhere"], keys=[b"o"]), leader_epoch=0))
    assert held.release() > 0
    values = dict(all_values(log))
    assert values[end] == b"during"
    kept = {v for o, v in all_values(log) if o < end}
    assert kept == set(latest.values())


def test_a_log_deleted_under_a_held_pass_leaves_nothing_behind(
    manager: LogManager, clock: FakeClock, tmp_path: Path
) -> None:
    log = manager.get_or_create("gone", 0)
    fill(log, clock, 200, 10)
    log.roll()
    held = HeldPass(clock)
    held.start(log)
    completes(lambda: manager.delete("gone", 0))
    assert held.release() == 0
    assert not any(p.name.startswith("gone-") for p in tmp_path.iterdir())
