"""What the agent reports about itself: per-queue status and per-topic counts of events.

`QueueStatus` is one queue's line in `weir agent status` and the metrics; `TopicCounts` counts
the events offered, stored and refused per topic since the agent started.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from weir.agent.agent import SendError


@dataclass(frozen=True, slots=True)
class QueueStatus:
    topic: str
    partition: int
    durability: str
    depth: int
    bytes: int
    oldest_age_ms: int
    sent: int
    dropped: int
    spilled: int
    sender: str
    last_error: str | None


class TopicCounts:
    """Events offered, stored and refused per topic since the agent started. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.accepted: dict[str, int] = defaultdict(int)
        self.stored: dict[str, int] = defaultdict(int)
        self.rejected: dict[tuple[str, str], int] = defaultdict(int)

    def add(self, topic: str, count: int, error: SendError | None) -> None:
        with self._lock:
            self.accepted[topic] += count
            if error is None:
                self.stored[topic] += count
            else:
                self.rejected[(topic, error.code)] += count

    def snapshot(self) -> tuple[dict[str, int], dict[str, int], dict[tuple[str, str], int]]:
        with self._lock:
            return dict(self.accepted), dict(self.stored), dict(self.rejected)
