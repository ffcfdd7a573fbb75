"""Time and scheduling, injected everywhere logic depends on them.

Owns the `Clock` and `Scheduler` interfaces with one real and one fake engine each. Logic never
calls `time.time()` itself: it asks the clock it was given, so tests drive it on fake time.
Nothing here knows about logs, brokers or sockets.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

log = logging.getLogger(__name__)


class Clock(Protocol):
    def milliseconds(self) -> int:
        """Wall-clock time in milliseconds since the epoch (record timestamps, file ages)."""
        ...

    def monotonic_ms(self) -> int:
        """A monotonic reading in milliseconds (intervals and deadlines)."""
        ...

    def sleep_ms(self, ms: int) -> None: ...


class SystemClock:
    def milliseconds(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def sleep_ms(self, ms: int) -> None:
        time.sleep(ms / 1000)


class FakeClock:
    """A clock that moves only when told to. `sleep_ms` advances it."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._mono = 0
        self._listeners: list[Callable[[], object]] = []

    def milliseconds(self) -> int:
        return self._now

    def monotonic_ms(self) -> int:
        return self._mono

    def sleep_ms(self, ms: int) -> None:
        self.advance(ms)

    def advance(self, ms: int) -> None:
        self._now += ms
        self._mono += ms
        for listener in list(self._listeners):
            listener()

    def on_advance(self, listener: Callable[[], object]) -> None:
        self._listeners.append(listener)


class Scheduler(Protocol):
    def schedule(
        self, name: str, task: Callable[[], object], delay_ms: int, period_ms: int | None = None
    ) -> None:
        """Run `task` after `delay_ms`, then every `period_ms` if given."""
        ...

    def shutdown(self) -> None: ...


@dataclass(order=True)
class _Entry:
    due_ms: int
    seq: int
    name: str = field(compare=False)
    task: Callable[[], object] = field(compare=False)
    period_ms: int | None = field(compare=False)


class _TaskQueue:
    """A heap of due tasks; shared by both schedulers."""

    def __init__(self) -> None:
        self._heap: list[_Entry] = []
        self._seq = itertools.count()

    def push(self, due_ms: int, name: str, task: Callable[[], object], period: int | None) -> None:
        heapq.heappush(self._heap, _Entry(due_ms, next(self._seq), name, task, period))

    def next_due(self) -> int | None:
        return self._heap[0].due_ms if self._heap else None

    def pop_due(self, now_ms: int) -> _Entry | None:
        if self._heap and self._heap[0].due_ms <= now_ms:
            return heapq.heappop(self._heap)
        return None

    @staticmethod
    def run(entry: _Entry) -> None:
        try:
            entry.task()
        except Exception:
            log.exception("scheduled task %s failed", entry.name)

    def reschedule(self, entry: _Entry) -> None:
        if entry.period_ms is not None:
            self.push(entry.due_ms + entry.period_ms, entry.name, entry.task, entry.period_ms)

    def clear(self) -> None:
        self._heap.clear()


class FakeScheduler:
    """Runs tasks synchronously as its `FakeClock` advances (Kafka's MockScheduler)."""

    def __init__(self, clock: FakeClock) -> None:
        self._clock = clock
        self._queue = _TaskQueue()
        clock.on_advance(self.run_due)

    def schedule(
        self, name: str, task: Callable[[], object], delay_ms: int, period_ms: int | None = None
    ) -> None:
        self._queue.push(self._clock.monotonic_ms() + delay_ms, name, task, period_ms)

    def run_due(self) -> None:
        now = self._clock.monotonic_ms()
        while (entry := self._queue.pop_due(now)) is not None:
            self._queue.run(entry)
            self._queue.reschedule(entry)

    def shutdown(self) -> None:
        self._queue.clear()


class ThreadScheduler:
    """Runs tasks on one daemon thread. Tasks must be short; they run one at a time."""

    def __init__(self, clock: Clock | None = None, name: str = "weir-scheduler") -> None:
        self._clock: Clock = clock or SystemClock()
        self._queue = _TaskQueue()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def schedule(
        self, name: str, task: Callable[[], object], delay_ms: int, period_ms: int | None = None
    ) -> None:
        with self._cond:
            self._queue.push(self._clock.monotonic_ms() + delay_ms, name, task, period_ms)
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                entry = self._next_entry()
                if entry is None:
                    return
            self._queue.run(entry)
            with self._cond:
                if not self._stopped:
                    self._queue.reschedule(entry)

    def _next_entry(self) -> _Entry | None:
        while not self._stopped:
            entry = self._queue.pop_due(self._clock.monotonic_ms())
            if entry is not None:
                return entry
            due = self._queue.next_due()
            wait = None if due is None else max(0, due - self._clock.monotonic_ms()) / 1000
            self._cond.wait(wait)
        return None

    def shutdown(self) -> None:
        with self._cond:
            self._stopped = True
            self._queue.clear()
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
