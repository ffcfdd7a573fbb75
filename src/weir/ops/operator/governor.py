"""Move speed that follows the cluster's load (SEEDS.md §5: "adjust migration speed to cluster
load").

While moves run with a throttle, the executor looks every `ADAPT_EVERY_S` at how idle the request
handling of the brokers taking part is (each broker's handler idle ratio, from its metrics, as
Kafka's RequestHandlerAvgIdlePercent). When the busiest of them is idle less than `IDLE_LOW` of
the time, the moves copy at half the rate (down to an eighth of the throttle asked for); when it
is idle more than `IDLE_HIGH`, at half as fast again (up to four times the throttle asked for).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

IDLE_LOW, IDLE_HIGH = 0.3, 0.6
ADAPT_EVERY_S = 5.0


@dataclass
class ThrottleGovernor:
    base: int
    rate: int = 0

    def __post_init__(self) -> None:
        if self.base < 1:
            raise ValueError(f"a throttle of {self.base} B/s: it must be 1 or more")
        self.rate = self.rate or self.base

    @property
    def floor(self) -> int:
        return max(1, self.base // 8)

    @property
    def ceiling(self) -> int:
        return self.base * 4

    def next_rate(self, idle: Iterable[float]) -> int:
        """The rate for the next while, from the brokers' idle ratios (none known: unchanged)."""
        ratios = list(idle)
        if not ratios:
            return self.rate
        busiest = min(ratios)
        if busiest < IDLE_LOW:
            self.rate = max(self.floor, self.rate // 2)
        elif busiest > IDLE_HIGH:
            self.rate = min(self.ceiling, self.rate * 3 // 2)
        return self.rate
