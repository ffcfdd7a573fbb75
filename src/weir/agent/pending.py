"""Topic-level pending queues: the events of a topic whose partition count is not known yet.

A caller is answered at once even for a topic the agent has never seen while the cluster is
unreachable. Such a topic's events are stored, in the order they arrive, in one queue for the
whole topic, `<spool>/<topic>/pending.ring` (a `DiskQueue` of the `events` class for topics of
that class, `logs` for the others), and the caller is answered as by any queue of its class.
While that queue holds events, later events of the topic join it, behind them.

`PendingRouter`'s thread asks for the partition count of every topic with a pending queue. Once
it is known, the events move, oldest first, into the partition queues, each placed exactly where
`Agent.send` would have put it (murmur2 of the key modulo the partition count; unkeyed events
stick to a partition), so the order per key is kept. A batch leaves the pending queue only after
its partition queues accepted it (`events`: durably), so a crash in between may deliver it twice,
never lose it. When the queue is empty the topic goes DIRECT: its file is removed and its events
go straight to their partition queues.

If a reachable cluster answers that the topic does not exist (and does not create it), the
pending events go to the dead-letter directory (`weir.agent.deadletter`), counted, and the topic
is DEAD for this queue: the router forgets it, and the next event of the topic starts over.

States of a pending topic and their transitions:

    PENDING ──count known, queue empty──► DIRECT
    PENDING ──topic does not exist, queue empty──► DEAD

Thread-safety (docs/threads.md): callers append from any thread; one router thread moves events. A
topic leaves PENDING under its lock, and only while no caller is between choosing its queue and
finishing an append, so no event is ever appended behind the router's back.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from weir.agent.deadletter import DeadLetters
from weir.agent.event import record_key
from weir.agent.partitioner import StickyPartitioner, partition_for_key
from weir.agent.queue import DiskQueue, QueueFullError
from weir.agent.registry import MetadataUnavailable, UnknownTopicError
from weir.clock import Clock

log = logging.getLogger(__name__)

PENDING_FILE = "pending.ring"
MOVE_RECORDS = 5000
MOVE_BYTES = 4 << 20


class Route(enum.Enum):
    PENDING = "pending"
    DIRECT = "direct"
    DEAD = "dead-lettered"


TRANSITIONS: dict[Route, frozenset[Route]] = {
    Route.PENDING: frozenset({Route.DIRECT, Route.DEAD}),
    Route.DIRECT: frozenset(),
    Route.DEAD: frozenset(),
}

PartitionStore = Callable[[str, int, list[bytes]], None]
"""Appends payloads to a partition queue; raises `QueueFullError` when refused."""


class PendingTopic:
    """One topic's pending queue and its route."""

    def __init__(self, topic: str, queue: DiskQueue) -> None:
        self.topic, self.queue = topic, queue
        self.route = Route.PENDING
        self._lock = threading.Lock()
        self._appending = 0

    def append(self, payloads: list[bytes]) -> bool:
        """Store behind the events already pending; False once the topic left PENDING."""
        with self._lock:
            if self.route is not Route.PENDING:
                return False
            self._appending += 1
        try:
            self.queue.append(payloads)
        finally:
            with self._lock:
                self._appending -= 1
        return True

    def leave(self, route: Route) -> bool:
        """Move to `route` if the queue is empty and no append is under way; True if it moved."""
        with self._lock:
            if self._appending or self.queue.state().depth:
                return False
            if route not in TRANSITIONS[self.route]:
                raise RuntimeError(f"pending topic cannot go from {self.route} to {route}")
            self.route = route
        self.queue.close()
        self.queue.ring.path.unlink(missing_ok=True)
        return True


class PendingRouter:
    """Owns every pending topic and the thread that routes their events once metadata arrives."""

    def __init__(
        self,
        spool: Path,
        *,
        make_queue: Callable[[Path, str], DiskQueue],
        lookup: Callable[[str], int],
        store: PartitionStore,
        dead_letters: DeadLetters,
        sticky: StickyPartitioner,
        clock: Clock,
        poll_ms: int = 200,
    ) -> None:
        self._spool = spool
        self._make_queue, self._lookup, self._store = make_queue, lookup, store
        self.dead_letters, self._sticky, self._clock = dead_letters, sticky, clock
        self._poll_s = poll_ms / 1000
        self._lock = threading.Lock()
        self._topics: dict[str, PendingTopic] = {}
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="weir-agent-pending", daemon=True)

    # -- callers ----------------------------------------------------------------------------

    def holds(self, topic: str) -> bool:
        """True while the topic's events must go through its pending queue."""
        return topic in self._topics

    def append(self, topic: str, payloads: list[bytes], *, unknown: bool) -> bool:
        """Store in the topic's pending queue; True if stored there.

        A topic without a pending queue gets one only when `unknown` (its partition count is not
        known); otherwise, or once the topic just left PENDING, the caller routes the events
        itself. Raises `QueueFullError` as the queue's class does.
        """
        pending = self._topics.get(topic)
        if pending is None:
            if not unknown:
                return False
            pending = self._open(topic)
        return pending.append(payloads)

    def _open(self, topic: str) -> PendingTopic:
        with self._lock:
            pending = self._topics.get(topic)
            if pending is None:
                queue = self._make_queue(self._spool / topic / PENDING_FILE, topic)
                pending = self._topics[topic] = PendingTopic(topic, queue)
                self._wake.set()
            return pending

    def open_existing(self) -> None:
        """Take up the pending queues left in the spool directory."""
        for path in sorted(self._spool.glob(f"*/{PENDING_FILE}")):
            self._open(path.parent.name)

    # -- routing ----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.is_set():
            for pending in list(self._topics.values()):
                if self._stopping.is_set():
                    return
                try:
                    self.resolve(pending)
                except OSError as exc:  # a full or failing disk: the events stay pending
                    log.warning("%s: pending events not moved: %s", pending.topic, exc)
            self._wake.wait(self._poll_s)
            self._wake.clear()

    def resolve(self, pending: PendingTopic) -> None:
        """Route the topic's events if its partition count is known, dead-letter them if the
        topic does not exist, or leave them waiting if the cluster cannot say."""
        try:
            count = self._lookup(pending.topic)
        except MetadataUnavailable:
            return
        except UnknownTopicError as exc:
            reason = str(exc)
            self._drain(pending, lambda payloads: self._dead_letter(pending, payloads, reason))
            self._forget(pending, Route.DEAD)
            return
        if self._drain(pending, lambda payloads: self.place(pending.topic, payloads, count)):
            self._forget(pending, Route.DIRECT)

    def _drain(self, pending: PendingTopic, take: Callable[[list[bytes]], None]) -> bool:
        """Hand batches to `take` until the queue is empty; False if `take` refused one."""
        while not self._stopping.is_set():
            batch = pending.queue.peek(MOVE_RECORDS, MOVE_BYTES)
            if not batch.payloads:
                return True
            try:
                take(batch.payloads)
            except QueueFullError:
                return False
            pending.queue.acknowledge(batch)
        return False

    def place(self, topic: str, payloads: list[bytes], count: int) -> None:
        """Append stored events to the partition queues their keys choose among `count`."""
        by_partition: dict[int, list[bytes]] = defaultdict(list)
        for payload in payloads:
            key = record_key(payload)
            if key is None:
                by_partition[self._sticky.partition(topic, count)].append(payload)
            else:
                by_partition[partition_for_key(key, count)].append(payload)
        for partition, share in by_partition.items():
            self._store(topic, partition, share)

    def _dead_letter(self, pending: PendingTopic, payloads: list[bytes], reason: str) -> None:
        log.warning("%s: %d events dead-lettered: %s", pending.topic, len(payloads), reason)
        self.dead_letters.add(pending.topic, payloads, reason)

    def _forget(self, pending: PendingTopic, route: Route) -> None:
        with self._lock:
            if pending.leave(route):
                del self._topics[pending.topic]

    # -- status and lifecycle ---------------------------------------------------------------

    def flush(self) -> None:
        for pending in list(self._topics.values()):
            pending.queue.flush()

    def statuses(self) -> list[dict[str, Any]]:
        result = []
        for pending in list(self._topics.values()):
            state = pending.queue.state()
            result.append({
                "topic": pending.topic,
                "route": pending.route.value,
                "durability": pending.queue.durability.value,
                "depth": state.depth,
                "bytes": state.used_bytes,
                "oldest_age_ms": pending.queue.oldest_age_ms() if state.depth else 0,
            })  # fmt: skip
        return result

    def depth(self) -> int:
        return sum(p.queue.state().depth for p in list(self._topics.values()))

    def stop(self, timeout_s: float) -> None:
        """Stop routing (a batch being moved is finished first) and close the queues."""
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        for pending in list(self._topics.values()):
            pending.queue.close()
