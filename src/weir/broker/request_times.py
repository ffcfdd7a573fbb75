"""Where a request's time goes, split as Kafka's RequestMetrics split it:

- queue: from the moment its frame was read until its handler starts (on a connection, a request
  waits for the one before it to be answered, as Kafka's muted channel makes it wait);
- local: the handler's own work (total handling minus remote);
- remote: waiting on other replicas or for data: an acks=all produce waiting for the ISR, a
  fetch parked until records arrive (Kafka's purgatory);
- send: writing the response to the socket;
- total: from the frame read to the response written.

The connection that reads a frame makes its `RequestTimes` current (a context variable, so the
handler's own task sees it) and the places that park a request add their waits with
`remote_wait`. Only while metrics are counted; otherwise nothing is current and `remote_wait`
does nothing. Times are `time.perf_counter_ns`.

Thread-safety (docs/threads.md): event-loop only.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

#: the phases, by the name Kafka's RequestMetrics give their histograms
PHASES = ("requestqueuetimems", "localtimems", "remotetimems", "responsesendtimems",
          "totaltimems")  # fmt: skip


@dataclass(slots=True)
class RequestTimes:
    received_ns: int
    started_ns: int = 0
    remote_ns: int = 0
    handled_ns: int = 0
    api_key: int = -1

    def phases(self, sent_ns: int) -> tuple[int, int, int, int, int]:
        """Nanoseconds in each of PHASES, the response written at `sent_ns`."""
        handling = max(self.handled_ns - self.started_ns, 0)
        remote = min(self.remote_ns, handling)
        return (
            max(self.started_ns - self.received_ns, 0),
            handling - remote,
            remote,
            max(sent_ns - self.handled_ns, 0),
            max(sent_ns - self.received_ns, 0),
        )


_current: ContextVar[RequestTimes | None] = ContextVar("weir_request_times", default=None)


def begin(received_ns: int) -> RequestTimes:
    """A request whose frame was read at `received_ns` is the current one from now on."""
    times = RequestTimes(received_ns, time.perf_counter_ns())
    _current.set(times)
    return times


def current() -> RequestTimes | None:
    return _current.get()


def end() -> None:
    _current.set(None)


@contextmanager
def remote_wait() -> Iterator[None]:
    """Count the time inside as the current request's remote time (if one is timed)."""
    times = _current.get()
    if times is None:
        yield
        return
    started = time.perf_counter_ns()
    try:
        yield
    finally:
        times.remote_ns += time.perf_counter_ns() - started
