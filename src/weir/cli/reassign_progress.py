"""How far the moves under way have copied: each added replica's log size against its leader's,
from DescribeLogDirs to the brokers involved (one request each). A replica catches up to the
leader's log end, so its size approaches the leader's; it joins the ISR, and the move completes,
a little before the sizes are equal (a segment rolled or cleaned differently makes them differ by
a little either way, so the share is capped at 100%).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TextIO

from kio.schema.describe_log_dirs.v4.request import DescribableLogDirTopic, DescribeLogDirsRequest
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i32

from weir.cli.broker_socket import BrokerConnection, BrokerConnectionError
from weir.cli.clients import ADMIN_TIMEOUT
from weir.protocol.apis import ApiKey
from weir.protocol.client_settings import ClientSecurity

TopicPartition = tuple[str, int]
DESCRIBE_LOG_DIRS_VERSION = 4
CLIENT_ID = "weir-reassign"
#: how often a waiting command reports progress
REPORT_INTERVAL_S = 5.0


@dataclass(frozen=True, slots=True)
class ReplicaCopy:
    """An added replica of a moving partition: its bytes and its leader's (None: not known,
    e.g. its broker did not answer)."""

    partition: TopicPartition
    replica: int
    copied: int | None
    total: int | None

    @property
    def share(self) -> float | None:
        if self.copied is None or not self.total:
            return None
        return min(self.copied / self.total, 1.0)

    def describe(self) -> str:
        if self.copied is None or self.total is None:
            return f"replica {self.replica}: size not known yet"
        share = self.share
        percent = f" ({share:.0%})" if share is not None else ""
        return f"replica {self.replica}: {_size(self.copied)} of {_size(self.total)}{percent}"


def replica_copies(
    metadata: Any,
    security: ClientSecurity,
    adding: dict[TopicPartition, list[int]],
) -> list[ReplicaCopy]:
    """The copies under way: each of `adding`'s replicas against its partition's leader."""
    leaders = {(t.name, p.partition_index): p.leader_id
               for t in metadata.topics for p in t.partitions}  # fmt: skip
    wanted: dict[int, set[TopicPartition]] = {}
    for tp, replicas in adding.items():
        for broker in (*replicas, leaders.get(tp, -1)):
            if broker >= 0:
                wanted.setdefault(broker, set()).add(tp)
    addresses = {b.node_id: (b.host, b.port) for b in metadata.brokers}
    sizes: dict[tuple[TopicPartition, int], int] = {}
    for broker, partitions in wanted.items():
        if broker in addresses:
            for tp, size in _sizes(addresses[broker], security, partitions).items():
                sizes[(tp, broker)] = size
    return [
        ReplicaCopy(tp, replica, sizes.get((tp, replica)), sizes.get((tp, leaders.get(tp, -1))))
        for tp, replicas in sorted(adding.items())
        for replica in replicas
    ]


def _sizes(
    address: tuple[str, int], security: ClientSecurity, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, int]:
    """The size of each of `partitions`' replica on one broker (not its future replica in
    another directory); {} when the broker cannot be asked."""
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    request = DescribeLogDirsRequest(topics=tuple(
        DescribableLogDirTopic(topic=TopicName(topic), partitions=tuple(map(i32, sorted(ids))))
        for topic, ids in sorted(by_topic.items())))  # fmt: skip
    try:
        with BrokerConnection(*address, security, timeout=ADMIN_TIMEOUT,
                              client_id=CLIENT_ID) as conn:  # fmt: skip
            response = conn.call(ApiKey.DESCRIBE_LOG_DIRS, DESCRIBE_LOG_DIRS_VERSION, request)
    except BrokerConnectionError:
        return {}
    return {
        (topic.name, p.partition_index): p.partition_size
        for result in response.results if result.error_code is ErrorCode.none
        for topic in result.topics
        for p in topic.partitions if not p.is_future_key
    }  # fmt: skip


def summary(copies: list[ReplicaCopy], done: int, moves: int) -> str:
    """One line: partitions done, and bytes copied of the copies whose sizes are known."""
    known = [c for c in copies if c.copied is not None and c.total is not None]
    copied = sum(min(c.copied or 0, c.total or 0) for c in known)
    total = sum(c.total or 0 for c in known)
    line = f"{done} of {moves} partition moves done"
    if total:
        line += f"; {_size(copied)} of {_size(total)} copied ({copied / total:.0%})"
    return line


class ProgressReporter:
    """Reports at most every REPORT_INTERVAL_S, to `out` (stderr by default), what `look`
    describes."""

    def __init__(self, look: Callable[[], str], out: TextIO | None = None) -> None:
        self._look = look
        self._out = out if out is not None else sys.stderr
        self._last = 0.0

    def tick(self) -> None:
        now = time.monotonic()
        if now - self._last < REPORT_INTERVAL_S:
            return
        self._last = now
        print(self._look(), file=self._out, flush=True)


def _size(size: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"
