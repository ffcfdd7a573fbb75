"""The controller's queue of events and the one thread that handles them (Kafka's
`ControllerEventManager`), with the one timer the controller needs (the leader balance check).

Tests and benches drive it without the thread: `process_pending` handles what is queued, and
due timers by the injected clock, on the caller's thread.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from weir.clock import Clock
from weir.cluster.controller.events import ControllerEvent, Shutdown
from weir.cluster.controller.stats import ControllerStats

log = logging.getLogger(__package__)


class ControllerEventManager:
    """Thread-safety (docs/threads.md): `put`, `clear_and_put` and `start` from any thread (a
    `queue.Queue`);
    `schedule` from the handling thread only; events are handled on one thread at a time."""

    def __init__(
        self,
        handle: Callable[[ControllerEvent], None],
        clock: Clock,
        name: str = "weir-controller",
        stats: ControllerStats | None = None,
    ) -> None:
        self._handle = handle
        self._clock = clock
        self._stats = stats if stats is not None else ControllerStats()
        #: (when queued, by time.perf_counter_ns; the event)
        self._queue: queue.Queue[tuple[int, ControllerEvent]] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._timer: tuple[int, ControllerEvent] | None = None

    def put(self, event: ControllerEvent) -> None:
        self._queue.put((time.perf_counter_ns(), event))

    @property
    def queue_size(self) -> int:
        return self._queue.qsize()

    def clear_and_put(self, event: ControllerEvent) -> None:
        """Drop the queued events (answering their requesters NOT_CONTROLLER), then queue
        `event`: what a lost session does, as Kafka's `Expire` does."""
        while True:
            try:
                self._queue.get_nowait()[1].preempt()
            except queue.Empty:
                break
        self.put(event)

    def schedule(self, event: ControllerEvent, delay_ms: int) -> None:
        """Queue `event` after `delay_ms`; it replaces any timer set before."""
        self._timer = (self._clock.monotonic_ms() + delay_ms, event)

    def cancel_timer(self) -> None:
        self._timer = None

    # ---- the thread ------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout=timeout_s)

    def _run(self) -> None:
        while True:
            try:
                queued_ns, event = self._queue.get(timeout=self._until_timer_s())
            except queue.Empty:
                event = self._take_due_timer() or ControllerEvent()
                queued_ns = time.perf_counter_ns()
            self._process(event, queued_ns)
            if isinstance(event, Shutdown):
                return

    def _until_timer_s(self) -> float | None:
        if self._timer is None:
            return None
        return max(0, self._timer[0] - self._clock.monotonic_ms()) / 1000

    def _take_due_timer(self) -> ControllerEvent | None:
        if self._timer is None or self._timer[0] > self._clock.monotonic_ms():
            return None
        event, self._timer = self._timer[1], None
        return event

    def _process(self, event: ControllerEvent, queued_ns: int) -> None:
        self._stats.events += 1
        self._stats.event_queue_ns += time.perf_counter_ns() - queued_ns
        try:
            self._handle(event)
        except Exception:
            log.exception("controller event %s failed", type(event).__name__)
            event.preempt()

    # ---- without the thread ----------------------------------------------------------------------

    def process_pending(self) -> int:
        """Handle every queued event, and a due timer, on this thread; how many were handled."""
        handled = 0
        while True:
            try:
                queued_ns, event = self._queue.get_nowait()
            except queue.Empty:
                due = self._take_due_timer()
                if due is None:
                    return handled
                queued_ns, event = time.perf_counter_ns(), due
            self._process(event, queued_ns)
            handled += 1
