"""What a log ETL run has read so far and what it has left: the end offsets of its streaming
query's last progress report ({"topic": {"partition": offset}} per source) against the topic's
high watermarks. `weir pipeline logs` reports it on stderr as it runs; `weir demo` reports the
records read.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

from confluent_kafka import Consumer, KafkaException

from weir.pipeline.kafka_io import subscribed_partitions, watermarks

#: how often `weir pipeline logs` reports its backlog
REPORT_INTERVAL_S = 10.0


def read_offsets(progress: Any) -> dict[tuple[str, int], int]:
    """The offset each partition has been read to, by a streaming query's progress report."""
    read: dict[tuple[str, int], int] = {}
    for source in (progress or {}).get("sources", ()):
        end = source.get("endOffset")
        if isinstance(end, str):
            end = json.loads(end)
        for topic, partitions in (end or {}).items():
            if isinstance(partitions, dict):
                for partition, offset in partitions.items():
                    read[(topic, int(partition))] = int(offset)
    return read


def offsets_read(progress: Any) -> int:
    """The records read, summed over the partitions (offsets start at 0)."""
    return sum(read_offsets(progress).values())


class BacklogReporter:
    """Called as the job polls its query: at most every `interval_s`, one line with the
    batches done, the records read and the records the topic holds beyond them."""

    def __init__(
        self,
        client_options: Mapping[str, str],
        topic: str,
        *,
        out: TextIO | None = None,
        interval_s: float = REPORT_INTERVAL_S,
    ) -> None:
        self._client_options = dict(client_options)
        self._topic = topic
        self._out = out if out is not None else sys.stderr
        self._interval_s = interval_s
        self._last = time.monotonic()
        self._consumer: Consumer | None = None

    def __call__(self, query: Any) -> None:
        now = time.monotonic()
        if now - self._last < self._interval_s:
            return
        self._last = now
        progress = query.lastProgress
        if not progress:
            return
        read = read_offsets(progress)
        try:
            backlog = sum(max(high - read.get(tp, 0), 0) for tp, high in self._highs().items())
        except KafkaException as exc:
            print(f"ETL: batch {progress.get('batchId')}: {sum(read.values()):,} records read; "
                  f"backlog not known ({exc})", file=self._out, flush=True)  # fmt: skip
            return
        print(f"ETL: batch {progress.get('batchId')}: {sum(read.values()):,} records read, "
              f"{backlog:,} behind the topic's end", file=self._out, flush=True)  # fmt: skip

    def _highs(self) -> dict[tuple[str, int], int]:
        if self._consumer is None:
            self._consumer = Consumer({**self._client_options, "group.id": "weir-etl-progress",
                                       "enable.auto.commit": False})  # fmt: skip
        partitions = subscribed_partitions(self._consumer, topics=[self._topic], pattern=None)
        return {tp: marks.high for tp, marks in watermarks(self._consumer, partitions).items()}

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
