"""The rate a client quota is measured by, as Kafka's metrics compute it: a `Rate` over a
`WindowedSum` (`SampledStat`), and the throttle time of a client over its bound (`QuotaUtils`).

`quota.window.num` samples of `quota.window.size.seconds` each: a value is added to the current
sample, which is replaced by the next once it is a window old; samples older than all the
windows together are reset before the rate is measured. The rate is the sum of the samples
over the time they cover, counted as at least `quota.window.num - 1` full windows (so a client's
first burst is not measured as a huge rate; a replication throttle counts at least one, so a
move starts at its rate instead of with ten windows' worth at once). A client whose rate
exceeds its bound is throttled for as long as it would take, at the bound, to bring the rate
back to it: `(rate - bound) / bound * window`.

Pure arithmetic on millisecond timestamps passed in; not thread-safe (the event loop owns it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class QuotaWindow:
    """`quota.window.num` samples of `quota.window.size.seconds` each."""

    samples: int = 11
    size_ms: int = 1000
    #: the fewest full windows a rate is taken over (None: `samples - 1`, Kafka's, which lets a
    #: first burst of that many windows' worth through)
    min_windows: int | None = None

    @property
    def least_windows(self) -> int:
        return self.samples - 1 if self.min_windows is None else self.min_windows

    @property
    def span_ms(self) -> int:
        """How long a sample counts: all the windows together."""
        return self.samples * self.size_ms


class _Sample:
    __slots__ = ("start_ms", "value")

    def __init__(self, start_ms: int) -> None:
        self.value = 0.0
        self.start_ms = start_ms

    def reset(self, now_ms: int) -> None:
        self.value = 0.0
        self.start_ms = now_ms


class SampledRate:
    """A rate per second over sliding windows (Kafka's `Rate` of a `WindowedSum`)."""

    __slots__ = ("_current", "_samples", "last_record_ms", "window")

    def __init__(self, window: QuotaWindow) -> None:
        self.window = window
        self._samples: list[_Sample] = []
        self._current = 0
        #: when a value was last recorded
        self.last_record_ms = 0

    def idle(self, now_ms: int) -> bool:
        """Whether nothing was recorded within all the windows: it measures 0, as a new one."""
        return now_ms - self.last_record_ms >= self.window.span_ms

    def record(self, value: float, now_ms: int) -> None:
        """Add `value` to the current sample (a new one once the current is a window old)."""
        self.last_record_ms = now_ms
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window.size_ms:
            sample = self._advance(now_ms)
        sample.value += value

    def measure(self, now_ms: int) -> float:
        """The rate per second at `now_ms`."""
        self._purge_obsolete(now_ms)
        total = sum(sample.value for sample in self._samples)
        return total / (self.window_size_ms(now_ms) / 1000)

    def window_size_ms(self, now_ms: int) -> int:
        """The time the rate is taken over: since the oldest sample began, and at least
        `samples - 1` full windows (never 0)."""
        self._purge_obsolete(now_ms)
        size = self.window.size_ms
        elapsed = now_ms - self._oldest(now_ms).start_ms
        full_windows = elapsed // size
        least = self.window.least_windows
        if full_windows < least:
            elapsed += (least - full_windows) * size
        return max(elapsed, 1)

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def _advance(self, now_ms: int) -> _Sample:
        self._current = (self._current + 1) % self.window.samples
        if self._current >= len(self._samples):
            sample = _Sample(now_ms)
            self._samples.append(sample)
            return sample
        sample = self._samples[self._current]
        sample.reset(now_ms)
        return sample

    def _oldest(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return min(self._samples, key=lambda sample: sample.start_ms)

    def _purge_obsolete(self, now_ms: int) -> None:
        for sample in self._samples:
            if now_ms - sample.start_ms >= self.window.span_ms:
                sample.reset(now_ms)


def throttle_time_ms(rate: float, bound: float, window_size_ms: int, max_ms: int) -> int:
    """How long a client measured at `rate` against its `bound` is throttled (Kafka's
    `QuotaUtils.throttleTime`): 0 within the bound. A bound of 0 (nothing allowed) gets
    `max_ms`, as does anything longer."""
    if rate <= bound:
        return 0
    if bound <= 0:
        return max_ms
    throttle = (rate - bound) / bound * window_size_ms
    return min(max_ms, math.floor(throttle + 0.5))
