"""One sender per queue: read a batch, deliver it, and only then advance the read position.

States and their transitions (a table, as everywhere in Weir):

    IDLE ──batch──► SENDING ──acked──► IDLE
                       └──failed──► BACKING_OFF ──backoff elapsed──► SENDING

While BACKING_OFF the backlog stays on disk in the queue; the same batch (the oldest records) is
sent again, so a partition's events reach the topic in the order they were accepted. A batch the
cluster refuses because its topic or partition does not exist is handed to `rehome` (the agent
dead-letters it, or places it again if the topic now has fewer partitions) instead of being
retried for ever.

Records of disk queues carry the agent's identity and their ring position as headers
(`weir.agent.exactly_once.with_position`). Delivered through the shared `KafkaLink`, a crash
between delivery and acknowledgement sends the batch again: at-least-once. Given the queue's
`RingTransactions` (exactly-once), each batch is a transaction, and before its first batch, and
again after any failed delivery, the sender resumes: it fences the queue's earlier producers and
skips the events a predecessor committed but did not acknowledge in the ring.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable

from weir.agent.event import Fields, decode_fields
from weir.agent.exactly_once import RingTransactions, skip_delivered, with_position
from weir.agent.link import ABANDON_GRACE_S, Abandon, DeliveryFailed, KafkaLink
from weir.agent.queue import PartitionQueue
from weir.agent.ring import RecordBatchView
from weir.clock import Clock

log = logging.getLogger(__name__)


Rehome = Callable[[PartitionQueue, list[bytes], str], bool]
"""Takes over a batch whose topic or partition the cluster says does not exist (dead-letters it,
or places it again); True if it did, and the batch leaves the queue."""


class SenderState(enum.Enum):
    IDLE = "idle"
    SENDING = "sending"
    BACKING_OFF = "backing-off"


TRANSITIONS: dict[SenderState, frozenset[SenderState]] = {
    SenderState.IDLE: frozenset({SenderState.SENDING}),
    SenderState.SENDING: frozenset({SenderState.IDLE, SenderState.BACKING_OFF}),
    SenderState.BACKING_OFF: frozenset({SenderState.SENDING}),
}


class Sender:
    """Drains one `PartitionQueue` into its topic-partition through the shared `KafkaLink`."""

    def __init__(
        self,
        queue: PartitionQueue,
        link: KafkaLink,
        *,
        clock: Clock,
        max_records: int = 5000,
        max_bytes: int = 1 << 20,
        backoff_ms: tuple[int, int] = (100, 5000),
        delivery_timeout_s: float = 60.0,
        rehome: Rehome = lambda queue, payloads, reason: False,
        identity: bytes | None = None,
        transactions: RingTransactions | None = None,
    ) -> None:
        """`identity`: the agent's, carried by each record with its ring position (queues whose
        positions survive restarts); `transactions`: deliver exactly-once through them."""
        self.queue, self._link, self._clock = queue, link, clock
        self._max_records, self._max_bytes = max_records, max_bytes
        self._backoff_min, self._backoff_max = backoff_ms
        self._backoff = self._backoff_min
        self._delivery_timeout_s = delivery_timeout_s
        self._rehome = rehome
        self._misplaced: str | None = None  # why the last batch was rehomed: so may the next
        self._identity, self._transactions = identity, transactions
        self.skipped = 0  # events a predecessor had committed but not acknowledged
        self.state = SenderState.IDLE
        self.sent = 0
        self.last_error: str | None = None
        self._abandon = Abandon()
        self._stopping = self._abandon.requested
        self._thread = threading.Thread(
            target=self._run, name=f"weir-sender-{queue.topic}-{queue.partition}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def request_stop(self, grace_s: float = ABANDON_GRACE_S) -> None:
        """Stop after the batch in flight, which gets `grace_s` more to be acknowledged."""
        self._abandon.grace_s = grace_s
        self._stopping.set()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    def stop(self) -> None:
        self.request_stop()
        self.join(self._delivery_timeout_s)

    def _move(self, target: SenderState) -> None:
        if target not in TRANSITIONS[self.state]:
            raise RuntimeError(f"sender cannot go from {self.state.value} to {target.value}")
        self.state = target

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                if not self.send_once():
                    self.queue.wait_for_data(0.1)
        finally:
            if self._transactions is not None:
                self._transactions.close()

    def send_once(self) -> bool:
        """Send the oldest batch; True if one was sent and acknowledged."""
        batch = self.queue.peek(self._max_records, self._max_bytes)
        if not batch.payloads:
            return False
        if self.state is SenderState.IDLE:
            self._move(SenderState.SENDING)
        if self._transactions is not None and not self._transactions.ready:
            if not self._resumed(batch.first_sequence):
                return False
            batch = self.queue.peek(self._max_records, self._max_bytes)
            if not batch.payloads:
                self._move(SenderState.IDLE)
                return True
        if self._misplaced is not None:
            if self._rehome(self.queue, batch.payloads, self._misplaced):
                self.queue.acknowledge(batch)
                return True
            self._misplaced = None
        records = [decode_fields(p) for p in batch.payloads]
        if self._identity is not None:
            records = with_position(records, self._identity, batch.first_sequence)
        try:
            self._deliver(batch, records)
        except DeliveryFailed as exc:
            if not (exc.placement and self._rehome(self.queue, batch.payloads, str(exc))):
                self.queue.note_delivery(False)
                self._back_off(str(exc))
                return False
            self._misplaced, records = str(exc), []
        self.queue.acknowledge(batch)
        self.queue.note_delivery(True)
        self.sent += len(records)
        self._backoff, self.last_error = self._backoff_min, None
        self._move(SenderState.IDLE)
        return True

    def _deliver(self, batch: RecordBatchView, records: list[Fields]) -> None:
        if self._transactions is not None:
            self._transactions.deliver(batch, records, self._delivery_timeout_s, self._abandon)
        else:
            self._link.deliver(self.queue.topic, records, self.queue.partition,
                               self._delivery_timeout_s, abandon=self._abandon)  # fmt: skip

    def _resumed(self, read_sequence: int) -> bool:
        """Fence earlier producers and skip what they committed; False (backing off) if the
        cluster could not tell."""
        assert self._transactions is not None
        try:
            position = self._transactions.resume(read_sequence)
        except DeliveryFailed as exc:
            self._back_off(f"resuming: {exc}")
            return False
        self.skipped += skip_delivered(self.queue, position, self._max_bytes)
        return True

    def _back_off(self, reason: str) -> None:
        log.info("%s-%d: delivery failed (%s); retry in %d ms",
                 self.queue.topic, self.queue.partition, reason, self._backoff)  # fmt: skip
        self.last_error = reason
        self._move(SenderState.BACKING_OFF)
        self._stopping.wait(self._backoff / 1000)
        self._backoff = min(self._backoff * 2, self._backoff_max)
        self._move(SenderState.SENDING)
