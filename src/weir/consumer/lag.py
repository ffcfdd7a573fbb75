"""High watermarks of a fetcher's partitions, for the lag metric.

Owns `Watermarks`: it asks the brokers (ListOffsets, through an AdminClient) in the
background and never blocks the fetcher. A consumer's own cached watermarks come from fetch
responses and so stop moving while its partitions are paused, exactly when lag matters most.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 10.0
LATEST = OffsetSpec.latest()  # type: ignore[no-untyped-call]


class Watermarks:
    """Thread-safety (docs/threads.md): one fetcher thread calls `refresh`; `high` may be read
    anywhere."""

    def __init__(self, config: dict[str, Any]) -> None:
        self._admin = AdminClient(config)
        self._pending: dict[TopicPartition, Future[Any]] = {}
        self.high: dict[tuple[str, int], int] = {}

    def refresh(self, partitions: Sequence[tuple[str, int]]) -> None:
        """Take in answers that arrived; ask again once all of the last request answered."""
        if any(not future.done() for future in self._pending.values()):
            return
        self._take_answers()
        if partitions:
            request = {TopicPartition(t, p): LATEST for t, p in partitions}
            self._pending = self._admin.list_offsets(request, request_timeout=REQUEST_TIMEOUT_S)

    def close(self) -> None:
        """Let go of the AdminClient now, so its threads stop with the fetcher."""
        del self._admin

    def _take_answers(self) -> None:
        high = dict(self.high)
        for partition, future in self._pending.items():
            try:
                high[(partition.topic, partition.partition)] = future.result().offset
            except KafkaException as exc:
                log.debug("no high watermark for %s: %s", partition, exc)
        self.high = high
        self._pending = {}
