"""The direct route of a topic: where `Agent.send` puts an event of a topic whose partition count
is known and which has nothing pending, with as little work per event as the placement allows.

A `DirectRoute` holds the partition count it was made for and the queues of the partitions used
so far, so an event costs one murmur2 (keyed) or one sticky step (unkeyed) and a list index. The
agent keeps one route per topic and drops it when the topic's partition count changes; a topic
with a pending queue never has one (its events must queue behind the pending ones).

Thread-safety (docs/threads.md): any thread may use a route; a queue looked up twice at once is the
same queue (the registry creates each once).
"""

from __future__ import annotations

from collections.abc import Callable

from weir.agent.partitioner import StickyPartitioner, partition_for_key
from weir.agent.queue import PartitionQueue


class DirectRoute:
    """Partition choice and partition queues of one topic, for one partition count."""

    def __init__(
        self,
        topic: str,
        count: int,
        *,
        queue_of: Callable[[str, int], PartitionQueue],
        sticky: StickyPartitioner,
    ) -> None:
        self.topic, self.count = topic, count
        self._queue_of, self._sticky = queue_of, sticky
        self._queues: list[PartitionQueue | None] = [None] * count

    def queue_for(self, key: bytes | None) -> PartitionQueue:
        """The queue of the partition an event with `key` goes to (as `Agent.send` places it)."""
        if self.count == 1:
            partition = 0
        elif key is not None:
            partition = partition_for_key(key, self.count)
        else:
            partition = self._sticky.partition(self.topic, self.count)
        queue = self._queues[partition]
        if queue is None:
            queue = self._queues[partition] = self._queue_of(self.topic, partition)
        return queue
