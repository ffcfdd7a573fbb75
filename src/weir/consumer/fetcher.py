"""A consumer thread: one group member that fetches records into the WorkQueue.

Owns `Fetcher` and its states:

    STARTING --subscribed--> FETCHING <--half the bound free-- PAUSED (saturated)
                                |  +---bound reached--------------->  |
                                +------------> STOPPING <-------------+ --released--> CLOSED

Back-pressure (decided by backpressure.py): partitions whose buffered records reach their share
of `max_buffered_records` are paused, and all of them when the bound itself is reached; the
fetcher keeps polling meanwhile, so heartbeats and the max.poll.interval.ms deadline are served
and no rebalance is triggered; librdkafka drops what it prefetched for paused partitions. It
never asks librdkafka for more records than there is room for, so the bound holds exactly.

The fetcher owns the `OwnedPartition`s of its assignment (the "global offset map": one
OffsetTracker each) and commits them every `commit_interval_ms` and on revocation. On
revocation queued records are dropped, running ones get `revocation_timeout_ms` to finish,
then the finished prefix is committed; anything later is abandoned uncommitted. Lost
partitions are abandoned without a commit. Everything here runs on the fetcher's own thread
(librdkafka calls the rebalance callbacks from `consume`).
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from itertools import groupby
from types import MappingProxyType
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition

from weir.clock import Clock
from weir.consumer.backpressure import BackPressure, Decision
from weir.consumer.commit import Committer
from weir.consumer.lag import Watermarks
from weir.consumer.metrics import FetcherStats, PartitionOffsets
from weir.consumer.partition import ABANDONED, RELEASED, REVOKING, OwnedPartition
from weir.consumer.record import MessageRecord, message_records
from weir.consumer.settings import ConsumerSettings, Delivery
from weir.consumer.workqueue import WorkQueue

log = logging.getLogger(__name__)

LAG_INTERVAL_MS = 2000
WAKE_TIMEOUT_S = 2.0
LATEST = -1  # ListOffsets' "latest" timestamp
PACE_WINDOW_MS = 50  # the workers' pace is measured over windows this long
FAST_DRAIN_MS = 5
FAST_PACE_PER_MS = 50  # only workers this fast (records/ms) count as draining the buffer now
#: the cluster refused the credentials: retrying will not mend it (Kafka's consumer throws too)
REFUSALS = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})

_error, _topic = Message.error, Message.topic
_partition, _offset = Message.partition, Message.offset


def _on_refusal(error: KafkaError) -> None:
    """The consumer's error_cb (librdkafka's logger reports the others): a refused
    authentication raises out of the poll that served it, and stops the fetcher."""
    if error.code() in REFUSALS:
        raise KafkaException(error)


class FetchState(enum.Enum):
    STARTING = "starting"
    FETCHING = "fetching"
    PAUSED = "paused"  # back-pressure: every owned partition is paused
    STOPPING = "stopping"  # releasing partitions before leaving the group
    CLOSED = "closed"


STARTING = FetchState.STARTING
FETCHING = FetchState.FETCHING
PAUSED = FetchState.PAUSED
STOPPING = FetchState.STOPPING
CLOSED = FetchState.CLOSED

TRANSITIONS = MappingProxyType({
    STARTING: frozenset({FETCHING, CLOSED}),
    FETCHING: frozenset({PAUSED, STOPPING}),
    PAUSED: frozenset({FETCHING, STOPPING}),
    STOPPING: frozenset({CLOSED}),
    CLOSED: frozenset(),
})  # fmt: skip

CommitterFactory = Callable[[Consumer, FetcherStats], Committer]


class Fetcher:
    def __init__(
        self,
        settings: ConsumerSettings,
        queue: WorkQueue,
        committer_factory: CommitterFactory,
        clock: Clock,
    ) -> None:
        self._settings = settings
        self._queue = queue
        self._committer_factory = committer_factory
        self._clock = clock
        self._pace_since_ms = clock.monotonic_ms()
        self._pace_finished = 0
        self._pace_per_ms = 0.0  # records the workers finished per millisecond, recently
        self._keep_results = settings.delivery is Delivery.EXACTLY_ONCE
        strategy = str(settings.client_config.get("partition.assignment.strategy", ""))
        self._cooperative = "cooperative" in strategy  # the binding cannot tell us
        self._owned: dict[tuple[str, int], OwnedPartition] = {}
        self._pressure: BackPressure[tuple[str, int]] = BackPressure(
            settings.max_buffered_records, settings.fetch_batch
        )
        self._stopping = threading.Event()
        self.state = STARTING
        self.stats = FetcherStats()
        self.error: BaseException | None = None

    def _transition(self, target: FetchState) -> None:
        if target not in TRANSITIONS[self.state]:
            raise RuntimeError(f"fetcher cannot go from {self.state.value} to {target.value}")
        self.state = target

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        """The thread's body: fetch until `stop`, then release everything and leave."""
        try:
            self._open()
            try:
                while not self._stopping.is_set():
                    self._poll_once()
            finally:
                self._close()
        except BaseException as exc:
            self.error = exc
            log.exception("fetcher failed")

    def _open(self) -> None:
        self._consumer = Consumer({**self._settings.consumer_config(), "error_cb": _on_refusal})
        try:
            self._committer = self._committer_factory(self._consumer, self.stats)
        except BaseException:
            self._consumer.close()
            raise
        self._watermarks = Watermarks(self._settings.admin_config())
        self._consumer.subscribe(
            list(self._settings.topics),
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        self._next_commit_ms = self._clock.monotonic_ms() + self._settings.commit_interval_ms
        self._next_lag_ms = 0
        self._transition(FETCHING)

    # ---- the poll loop ---------------------------------------------------------------------

    def _poll_once(self) -> None:
        count = self._pressure.fetch_count(self._buffered(), len(self._owned))
        if count or self._pressure.saturated:  # saturated: all paused, polling fetches nothing
            messages = self._consumer.consume(max(count, 1), self._settings.poll_timeout_ms / 1000)
            if messages:
                self._enqueue(messages)
        else:
            self._queue.wait_for_room(self._queue_limit(), self._settings.poll_timeout_ms / 1000)
        self._apply_back_pressure()
        now = self._clock.monotonic_ms()
        if now >= self._next_commit_ms or self._results_due():
            self._commit()
            self._next_commit_ms = now + self._settings.commit_interval_ms
        if now >= self._next_lag_ms:
            self._refresh_lag()
            self._next_lag_ms = now + LAG_INTERVAL_MS

    def _buffered(self) -> int:
        return self._queue.buffered + self._pending_results()

    def _queue_limit(self) -> int:
        """How many records the queue may hold now (pending results take their share)."""
        return self._settings.max_buffered_records - self._pending_results()

    def _pending_results(self) -> int:
        if not self._keep_results:
            return 0
        return sum(p.pending_results for p in self._owned.values())

    def _results_due(self) -> bool:
        """Exactly-once results wait in memory for their commit: commit early when they take
        up half the bound, rather than pause."""
        return self._pending_results() >= self._settings.max_buffered_records // 2

    def _enqueue(self, messages: list[Any]) -> None:
        """Hand fetched messages to the queue, one run of a partition at a time. Per-record
        work here is done by C-level calls over the whole batch (see record.py)."""
        if any(map(_error, messages)):
            messages = self._drop_errors(messages)
            if not messages:
                return
        # a fetched record always has both (None is for messages being produced)
        partitions = cast(list[int], list(map(_partition, messages)))
        offsets = cast(list[int], list(map(_offset, messages)))
        records = message_records(messages, partitions, offsets)
        if len(self._settings.topics) > 1:
            keys: list[Any] = list(zip(map(_topic, messages), partitions, strict=True))
        else:
            keys = partitions
        for key, start, end in _runs(keys):
            topic = key[0] if isinstance(key, tuple) else self._settings.topics[0]
            partition = key[1] if isinstance(key, tuple) else key
            self._hand_over((topic, partition), records[start:end], offsets[start:end])
        self.stats.buffered_peak = max(self.stats.buffered_peak, self._queue.buffered)

    def _drop_errors(self, messages: list[Any]) -> list[Any]:
        for message in messages:
            if message.error() is not None:
                self._on_error(message.error())
        return [message for message in messages if message.error() is None]

    def _hand_over(
        self, key: tuple[str, int], records: list[MessageRecord], offsets: list[int]
    ) -> None:
        owned = self._owned.get(key)
        if owned is None or not owned.active:
            return  # no longer ours: the next owner fetches them again
        stale = owned.already_committed(offsets)
        if stale:
            self._skip_committed(owned, offsets, stale)
            records, offsets = records[stale:], offsets[stale:]
            if not offsets:
                return
        owned.fetched(offsets)
        self._queue.put(owned, records)
        self.stats.fetched += len(records)

    def _skip_committed(self, owned: OwnedPartition, offsets: list[int], stale: int) -> None:
        """Fetched records below the committed offset are dropped; when nothing else came, the
        partition is moved to its committed offset rather than read up to it."""
        assert owned.committed is not None
        log.warning(
            "%s-%d: fetched offsets %d-%d lie below the committed offset %d; skipping them",
            owned.topic, owned.partition, offsets[0], offsets[stale - 1], owned.committed,
        )  # fmt: skip
        if stale < len(offsets):
            return
        position = KafkaTopicPartition(owned.topic, owned.partition, owned.committed)
        try:
            self._consumer.seek(position)
        except KafkaException as exc:
            log.warning("cannot seek %s to %d: %s", owned, owned.committed, exc)

    def _on_error(self, error: KafkaError) -> None:
        if error.fatal():
            raise KafkaException(error)
        log.warning("consumer error: %s", error.str())

    def _apply_back_pressure(self) -> None:
        """Pause and resume partitions as BackPressure decides. A pause is decided only when
        the buffer stayed at least half full for a poll timeout: a queue that fills for an
        instant is waited for instead (a pause throws prefetched records away), and not even
        waited for when the workers' pace drains it within FAST_DRAIN_MS."""
        decision = self._decide()
        if decision.pause and not decision.saturated and self._drains_fast():
            decision = Decision([], decision.resume, saturated=False)
        elif decision.pause and self._drains_soon():
            decision = self._decide()
        if decision.pause:
            log.debug("pausing %s (saturated: %s)", decision.pause, decision.saturated)
            self._consumer.pause([KafkaTopicPartition(t, p) for t, p in decision.pause])
            self.stats.pauses += len(decision.pause)
        if decision.resume:
            log.debug("resuming %s", decision.resume)
            resumed = [KafkaTopicPartition(t, p) for t, p in decision.resume]
            self._consumer.resume(resumed)
            self._wake_broker_threads(resumed)
        self._pressure.record(decision, self._owned)
        self.stats.paused_partitions = len(self._pressure.paused)
        self.stats.results_pending = self._pending_results()
        if decision.saturated != (self.state is PAUSED):
            self._transition(PAUSED if decision.saturated else FETCHING)

    def _decide(self) -> Decision[tuple[str, int]]:
        buffered = {key: partition.buffered for key, partition in self._owned.items()}
        return self._pressure.decide(buffered, self._buffered())

    def _drains_fast(self) -> bool:
        """Whether the workers, at a recent pace of at least FAST_PACE_PER_MS, bring the buffer
        below half the bound within FAST_DRAIN_MS. Waiting for them then costs more than it
        saves: two thread wake-ups per fetch, while they are through with the records in a
        fraction of that. A slower pace (runs finishing in bursts look fast over one window)
        keeps the usual decision."""
        now, finished = self._clock.monotonic_ms(), self._queue.finished
        elapsed_ms = now - self._pace_since_ms
        if elapsed_ms >= PACE_WINDOW_MS:
            self._pace_per_ms = (finished - self._pace_finished) / elapsed_ms
            self._pace_since_ms, self._pace_finished = now, finished
        if self._pace_per_ms < FAST_PACE_PER_MS:
            return False
        excess = self._buffered() - self._pressure.resume_mark + 1
        return excess < self._pace_per_ms * FAST_DRAIN_MS

    def _drains_soon(self) -> bool:
        limit = self._pressure.resume_mark - self._pending_results()
        return self._queue.wait_for_room(limit, self._settings.poll_timeout_ms / 1000)

    def _wake_broker_threads(self, partitions: list[KafkaTopicPartition]) -> None:
        """librdkafka does not wake its broker threads on resume: they notice resumed
        partitions at their next wake-up, up to a second later, while the queue runs dry. A
        ListOffsets request to every partition leader wakes them now, for one round trip."""
        latest = [KafkaTopicPartition(tp.topic, tp.partition, LATEST) for tp in partitions]
        try:
            self._consumer.offsets_for_times(latest, timeout=WAKE_TIMEOUT_S)
        except KafkaException as exc:
            log.debug("waking the broker threads failed: %s", exc)

    def _commit(self) -> None:
        fenced = self._committer.commit(list(self._owned.values()))
        for partition in fenced:
            self._restart_from_sink(partition)
        self._publish_partitions()

    def _refresh_lag(self) -> None:
        self._watermarks.refresh(list(self._owned))
        self._publish_partitions()

    def _publish_partitions(self) -> None:
        """The owned partitions' committed offsets and high watermarks, for the metrics."""
        high = self._watermarks.high
        self.stats.partitions = {
            key: PartitionOffsets(p.committed, high.get(key)) for key, p in self._owned.items()
        }

    # ---- rebalances ------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        self.stats.rebalances += 1
        self.stats.member_id = consumer.memberid() or ""
        keys = [(tp.topic, tp.partition) for tp in partitions]
        starts = self._committer.starting_offsets(keys)
        for tp, key in zip(partitions, keys, strict=True):
            start = starts.get(key)
            if self._keep_results and start is not None:
                tp.offset = start  # the sink's offsets are the ones that count
            self._owned[key] = OwnedPartition(tp.topic, tp.partition, start, self._keep_results)
        if self._cooperative:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)
        self._pause_as_decided(consumer, partitions, self._pressure.assigned(keys))
        self._publish_partitions()
        log.info("assigned %s", sorted(keys))

    @staticmethod
    def _pause_as_decided(
        consumer: Consumer, partitions: list[KafkaTopicPartition], paused: list[tuple[str, int]]
    ) -> None:
        """librdkafka keeps a partition paused across its revocation and a later assignment
        (our back-pressure forgets it when it is revoked), so every newly assigned partition
        is explicitly paused or resumed."""
        pause = set(paused)
        log.debug("assigned partitions starting paused: %s", sorted(pause))
        consumer.pause([tp for tp in partitions if (tp.topic, tp.partition) in pause])
        consumer.resume([tp for tp in partitions if (tp.topic, tp.partition) not in pause])

    def _on_revoke(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        self._release(self._take_owned(partitions))
        self._publish_partitions()
        if self._cooperative:
            consumer.incremental_unassign(partitions)
        else:
            consumer.unassign()

    def _on_lost(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        for partition in self._take_owned(partitions):
            partition.transition(ABANDONED)
            self._queue.drop(partition)
        self._publish_partitions()
        log.warning("lost %s", [f"{tp.topic}-{tp.partition}" for tp in partitions])
        if self._cooperative:
            consumer.incremental_unassign(partitions)
        else:
            consumer.unassign()

    def _take_owned(self, partitions: list[KafkaTopicPartition]) -> list[OwnedPartition]:
        taken = (self._owned.pop((tp.topic, tp.partition), None) for tp in partitions)
        return [partition for partition in taken if partition is not None]

    def _release(self, owned: Sequence[OwnedPartition]) -> None:
        """Revocation: stop handing out their records, give running ones until the deadline,
        commit the finished prefix, and forget them."""
        for partition in owned:
            partition.transition(REVOKING)
            self._queue.drop(partition)
        timeout_s = self._settings.revocation_timeout_ms / 1000
        if not self._queue.wait_idle(owned, timeout_s):
            log.warning("revoked partitions' work did not finish in %.1fs", timeout_s)
        self._committer.commit(owned)
        for partition in owned:
            partition.transition(RELEASED if partition.running == 0 else ABANDONED)

    def _restart_from_sink(self, fenced: OwnedPartition) -> None:
        """Another owner moved this partition's offset in the sink: drop our work and carry on
        from the sink's offset (or, if seeking fails, leave it alone until the next
        rebalance)."""
        self._owned.pop(fenced.key, None)
        fenced.transition(ABANDONED)
        self._queue.drop(fenced)
        start = self._committer.starting_offsets([fenced.key]).get(fenced.key)
        if start is None:
            return
        try:
            self._consumer.seek(KafkaTopicPartition(fenced.topic, fenced.partition, start))
        except KafkaException as exc:
            log.error("cannot seek %s to %d: %s", fenced, start, exc)
            return
        self._owned[fenced.key] = OwnedPartition(fenced.topic, fenced.partition, start, True)

    # ---- shutdown --------------------------------------------------------------------------

    def _close(self) -> None:
        """Release every partition (final commit), leave the group, close the committer."""
        self._transition(STOPPING)
        try:
            owned, self._owned = list(self._owned.values()), {}
            self._release(owned)
            self._consumer.close()
        finally:
            self._watermarks.close()
            self._committer.close()
            self._transition(CLOSED)


def _runs(keys: list[Any]) -> Iterator[tuple[Any, int, int]]:
    """(key, start, end) of each run of equal keys. librdkafka hands out a partition's
    records in blocks, so a batch is usually one run: that case costs one C-level count."""
    if keys.count(keys[0]) == len(keys):
        yield keys[0], 0, len(keys)
        return
    start = 0
    for key, run in groupby(keys):
        end = start + sum(1 for _ in run)
        yield key, start, end
        start = end
