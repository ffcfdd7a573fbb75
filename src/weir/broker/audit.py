"""Audit accounting: who reads and writes what, counted per minute per client and partition.

The produce handler counts each partition's batch a client had appended (its bytes as sent, its
records from the batch header), the fetch handler each partition's record batches sent to a
consumer (their bytes; their records as the offsets they span past the fetch offset, which is
what the consumer gets, the records of a batch before the fetch offset being skipped by it; on a
compacted topic, or with transaction markers, that overcounts records by the offsets removed or
taken by markers). Nothing is counted per record. Followers' fetches are not audited: they are
the cluster's own traffic, which the replication metrics count. Batches the broker refuses, and
a consumer's fetch answered empty for its quota, are not counted. Writes to `__audit` are not
counted either (they are the brokers' own, and counting them would feed the audit with itself).

A count is keyed by (minute, principal, client id, client address, api, topic, partition). The
minute is the wall clock's; should the clock step back, counts go on into the latest minute seen,
never into one already written. `AuditWriter` (`audit_writer.py`) takes the counts that changed
(`changed`) every `audit.flush.interval.ms` and reports what was written (`written`); counts of
a minute that has ended are forgotten once written, those of the current minute are kept and
written again when they grow. The memory is bounded: past `max_counts` counts (unwritten ones,
when `__audit` cannot be written) the oldest ended minute is dropped with a warning, and if only
the current minute is left, new counts of it are dropped and reported at the next flush.

Thread-safety (docs/threads.md): event-loop only, like the handlers that feed it.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from weir.broker.results import FetchResult
from weir.broker.security.session import ANONYMOUS, current_session
from weir.clock import Clock
from weir.protocol.audit_records import AUDIT_TOPIC, FETCH, PRODUCE, AuditEntry, minute_of

log = logging.getLogger(__name__)

#: the most counts kept in memory (each a few hundred bytes)
MAX_COUNTS = 100_000
#: the client id of the audit writer's Produce requests (`audit_writer.py`), which the leader
#: of `__audit` looks for
AUDIT_WRITER_CLIENT_ID = "weir-audit-writer"

#: (principal, client id, client address, api, topic, partition) within a minute
CountKey = tuple[str, str, str, str, str, int]


@dataclass(slots=True)
class Tally:
    """One key's counts in one minute, and what of them was last written."""

    bytes: int = 0
    records: int = 0
    written_bytes: int = -1
    written_records: int = -1

    @property
    def changed(self) -> bool:
        return self.bytes != self.written_bytes or self.records != self.written_records


class AuditLog:
    """The counts of this broker since they were last written. Event-loop only."""

    def __init__(self, node_id: int, clock: Clock, *, max_counts: int = MAX_COUNTS) -> None:
        self.node_id = node_id
        self.started_ms = clock.milliseconds()
        self.max_counts = max_counts
        self._clock = clock
        #: minute -> its counts; the latest minute seen is the current one
        self._minutes: dict[int, dict[CountKey, Tally]] = {}
        self._current_minute = -1
        self._current: dict[CountKey, Tally] = {}
        self._size = 0
        self._dropped = 0

    def produced(self, client_id: str | None, topic: str, partition: int, size: int,
                 records: int) -> None:  # fmt: skip
        """A client's batch of `size` bytes and `records` records appended to a partition."""
        if topic != AUDIT_TOPIC:
            self._count(PRODUCE, client_id, topic, partition, size, records)

    def fetched(self, client_id: str | None, results: Iterable[FetchResult]) -> None:
        """What a consumer's fetch sends: each partition's record batches."""
        for result in results:
            data = result.data
            if data is not None and data.size:
                records = max(0, data.next_offset - data.first_offset)
                self._count(FETCH, client_id, result.topic, result.partition, data.size, records)

    def _count(self, api: str, client_id: str | None, topic: str, partition: int, size: int,
               records: int) -> None:  # fmt: skip
        session = current_session()
        if session is None:
            key = (str(ANONYMOUS), client_id or "", "", api, topic, partition)
        else:
            key = (str(session.principal), client_id or "", session.client_address, api, topic,
                   partition)  # fmt: skip
        minute = minute_of(self._clock.milliseconds())
        if minute > self._current_minute:
            self._start_minute(minute)
        tally = self._current.get(key)
        if tally is None:
            tally = self._new_tally(key)
            if tally is None:
                return
        tally.bytes += size
        tally.records += records

    def _start_minute(self, minute: int) -> None:
        self._current_minute = minute
        self._current = self._minutes.setdefault(minute, {})

    def _new_tally(self, key: CountKey) -> Tally | None:
        """A new count of the current minute, room made for it; None if there is none."""
        while self._size >= self.max_counts:
            ended = [minute for minute in self._minutes if minute != self._current_minute]
            if not ended:
                self._dropped += 1
                return None
            oldest = min(ended)
            dropped = self._minutes.pop(oldest)
            self._size -= len(dropped)
            log.warning(
                "audit: dropped the unwritten counts of minute %s (%d counts): more than %d "
                "counts are waiting to be written to %s",
                _iso(oldest), len(dropped), self.max_counts, AUDIT_TOPIC,
            )  # fmt: skip
        tally = self._current[key] = Tally()
        self._size += 1
        return tally

    def __len__(self) -> int:
        """The counts held."""
        return self._size

    def changed(self) -> list[AuditEntry]:
        """The counts that changed since they were last written, oldest minute first."""
        if self._dropped:
            log.warning("audit: %d counts of minute %s dropped: more than %d counts are "
                        "waiting to be written to %s", self._dropped,
                        _iso(self._current_minute), self.max_counts, AUDIT_TOPIC)  # fmt: skip
            self._dropped = 0
        return [
            self._entry(minute, key, tally)
            for minute in sorted(self._minutes)
            for key, tally in self._minutes[minute].items()
            if tally.changed
        ]

    def written(self, entries: Sequence[AuditEntry]) -> None:
        """`entries` (from `changed`) are in `__audit`: ended minutes whose counts are all
        written are forgotten."""
        for entry in entries:
            tallies = self._minutes.get(entry.minute_ms)
            key = (entry.principal, entry.client_id, entry.address, entry.api, entry.topic,
                   entry.partition)  # fmt: skip
            tally = tallies.get(key) if tallies is not None else None
            if tally is not None:
                tally.written_bytes, tally.written_records = entry.bytes, entry.records
        for minute in [m for m in self._minutes if m != self._current_minute]:
            tallies = self._minutes[minute]
            if not any(tally.changed for tally in tallies.values()):
                del self._minutes[minute]
                self._size -= len(tallies)

    def _entry(self, minute: int, key: CountKey, tally: Tally) -> AuditEntry:
        principal, client_id, address, api, topic, partition = key
        return AuditEntry(
            minute_ms=minute, broker=self.node_id, broker_started_ms=self.started_ms,
            principal=principal, client_id=client_id, address=address, api=api, topic=topic,
            partition=partition, bytes=tally.bytes, records=tally.records,
        )  # fmt: skip


def _iso(milliseconds: int) -> str:
    moment = datetime.datetime.fromtimestamp(milliseconds / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%MZ")
