"""Fetch sessions (KIP-227): the broker's cache of incremental fetch sessions and the rules
that turn one Fetch request's session fields into what to read and what to answer.

A session remembers, per partition, what the fetcher asked for (fetch offset, partition max
bytes, current leader epoch) and what it was last told (high watermark, last stable offset, log
start offset). An incremental request (session epoch > 0) then carries only the partitions
whose fetch state changed, plus the ones to forget; the broker reads every partition of the
session, and the response carries only the partitions with records or with something the
fetcher does not know yet (Kafka's `CachedPartition.maybeUpdateResponseData`).

The request's session fields, as Kafka reads them (`FetchManager.newContext`):

| session id | epoch | meaning |
|---|---|---|
| 0 | -1 | full fetch, no session (and Fetch before v7) |
| any | 0 | full fetch; the session named (if any) is closed and a new one opened |
| id | -1 | full fetch, no session; session `id` is closed |
| id | > 0 | incremental fetch in session `id` at that epoch |

An unknown id answers FETCH_SESSION_ID_NOT_FOUND, a wrong epoch INVALID_FETCH_SESSION_EPOCH
(top-level error codes, no partitions, session id 0).

The cache holds `max.incremental.fetch.session.cache.slots` sessions. When it is full, a new
session takes the slot of (as Kafka, simplified): the least recently used session if it has
been idle `min.incremental.fetch.session.eviction.ms`; else the consumer session with fewest
partitions (least recently used among equals), when the newcomer is a follower (replica id set)
or a consumer with more partitions than that one. Otherwise the fetch is served without a
session (session id 0), and the fetcher keeps sending full requests.

Thread-safety (docs/threads.md): event-loop only. Never reads logs or sockets: the handler
passes the replica manager's results in.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from weir.broker.results import FetchRequestPartition, FetchResult

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1
MAX_SESSION_ID = 2**31 - 1
DEFAULT_CACHE_SLOTS = 1000
DEFAULT_EVICTION_MS = 120_000

TopicPartition = tuple[str, int]


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch`: 1 follows the largest (0 means a new session)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == MAX_EPOCH else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session: the fetcher's last request for it and what it was last
    told (-1: nothing yet, so the next response carries it)."""

    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def must_respond(self, result: FetchResult) -> bool:
        """Whether an incremental response carries `result`; notes what it tells."""
        respond = result.data is not None and result.data.size > 0
        if result.high_watermark != self.high_watermark:
            respond = True
            self.high_watermark = result.high_watermark
        if result.last_stable_offset != self.last_stable_offset:
            respond = True
            self.last_stable_offset = result.last_stable_offset
        if result.log_start_offset != self.log_start_offset:
            respond = True
            self.log_start_offset = result.log_start_offset
        if result.preferred_read_replica >= 0:
            respond = True
        if result.error is not ErrorCode.none:
            respond = True
            self.high_watermark = -1  # once the error clears, the high watermark goes out again
        return respond

    def forget_told(self) -> None:
        """The response carrying this partition was not sent: tell it all again."""
        self.high_watermark = -1


@dataclass(slots=True, eq=False)
class FetchSession:
    """One fetcher's session: its partitions in the order they are read (partitions that got
    records move to the end, so that `fetch.max.bytes` serves each in turn)."""

    id: int
    #: a follower's (replica id set): only another follower's may take its slot
    privileged: bool
    partitions: dict[TopicPartition, CachedPartition]
    last_used_ms: int
    #: the epoch the next incremental request must carry
    epoch: int = field(default=next_epoch(INITIAL_EPOCH))

    def update(
        self, changed: Iterable[FetchRequestPartition], forgotten: Iterable[TopicPartition]
    ) -> None:
        """An incremental request's partitions added or updated, then its forgotten ones
        removed (Kafka's order)."""
        for request in changed:
            tp = (request.topic, request.partition)
            cached = self.partitions.get(tp)
            if cached is None:
                self.partitions[tp] = _cached(request)
            else:
                cached.fetch_offset = request.offset
                cached.max_bytes = request.max_bytes
                cached.current_leader_epoch = request.current_leader_epoch
        for tp in forgotten:
            self.partitions.pop(tp, None)

    def requests(self) -> list[FetchRequestPartition]:
        """Every partition of the session, as the reads it asks for."""
        return [
            FetchRequestPartition(topic, index, c.fetch_offset, c.max_bytes,
                                  c.current_leader_epoch)
            for (topic, index), c in self.partitions.items()
        ]  # fmt: skip

    def select(self, results: Sequence[FetchResult], *, incremental: bool) -> list[FetchResult]:
        """The results the response carries: all of a full fetch's, an incremental fetch's
        with something new. Notes what each tells; partitions with records go to the end."""
        selected = []
        rotated = []
        for result in results:
            tp = (result.topic, result.partition)
            cached = self.partitions.get(tp)
            if cached is None:
                continue
            if cached.must_respond(result) or not incremental:
                selected.append(result)
                if result.data is not None and result.data.size > 0:
                    rotated.append(tp)
        for tp in rotated:
            self.partitions[tp] = self.partitions.pop(tp)
        return selected

    def forget_told(self, results: Iterable[FetchResult]) -> None:
        """A response carrying `results` was not sent (a throttled consumer's)."""
        for result in results:
            cached = self.partitions.get((result.topic, result.partition))
            if cached is not None:
                cached.forget_told()


def _cached(request: FetchRequestPartition) -> CachedPartition:
    return CachedPartition(request.offset, request.max_bytes, request.current_leader_epoch)


class FetchSessionCache:
    """The broker's sessions by id, least recently used first."""

    def __init__(
        self,
        slots: int = DEFAULT_CACHE_SLOTS,
        eviction_ms: int = DEFAULT_EVICTION_MS,
        rng: random.Random | None = None,
    ) -> None:
        self.slots = slots
        self.eviction_ms = eviction_ms
        self._rng = rng or random.Random()
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def touch(self, session: FetchSession, now_ms: int) -> None:
        session.last_used_ms = now_ms
        if session.id in self._sessions:
            self._sessions.move_to_end(session.id)

    def remove(self, session_id: int) -> FetchSession | None:
        return self._sessions.pop(session_id, None)

    def create(
        self, requests: Sequence[FetchRequestPartition], *, privileged: bool, now_ms: int
    ) -> FetchSession | None:
        """A new session of `requests`, or None when no slot can be had for it."""
        if not requests or self.slots <= 0:
            return None
        if len(self._sessions) >= self.slots and not self._evict_for(
            privileged, len(requests), now_ms
        ):
            return None
        partitions = {(r.topic, r.partition): _cached(r) for r in requests}
        session = FetchSession(self._new_id(), privileged, partitions, now_ms)
        self._sessions[session.id] = session
        return session

    def _new_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, MAX_SESSION_ID)
            if session_id not in self._sessions:
                return session_id

    def _evict_for(self, privileged: bool, size: int, now_ms: int) -> bool:
        """Free a slot for a new session (see the module's docstring); whether one was."""
        oldest = next(iter(self._sessions.values()))
        if now_ms - oldest.last_used_ms >= self.eviction_ms:
            return self._evict(oldest)
        consumers = [s for s in self._sessions.values() if not s.privileged]
        if not consumers:
            return False
        smallest = min(consumers, key=lambda s: len(s.partitions))  # first: least recently used
        if privileged or len(smallest.partitions) < size:
            return self._evict(smallest)
        return False

    def _evict(self, session: FetchSession) -> bool:
        del self._sessions[session.id]
        self.evictions += 1
        return True


@dataclass(slots=True)
class FetchContext:
    """How one Fetch request is served: what to read, which results to answer with and the
    session id the response carries (Kafka's FetchContext kinds: sessionless, full,
    incremental, error)."""

    #: a top-level session error: the response carries nothing else
    error: ErrorCode = ErrorCode.none
    wanted: list[FetchRequestPartition] = field(default_factory=list)
    session: FetchSession | None = None
    incremental: bool = False

    @property
    def session_id(self) -> int:
        return self.session.id if self.session is not None else INVALID_SESSION_ID

    def select(self, results: Sequence[FetchResult]) -> list[FetchResult]:
        if self.session is None:
            return list(results)
        return self.session.select(results, incremental=self.incremental)

    def throttled(self, cache: FetchSessionCache, sent: Iterable[FetchResult]) -> int:
        """The response carrying `sent` is replaced by an empty throttled one: the session id
        that one carries. A new session is dropped (the fetcher starts again with a full
        request); an incremental one goes on, telling `sent` again."""
        if self.session is None:
            return INVALID_SESSION_ID
        if not self.incremental:
            cache.remove(self.session.id)
            return INVALID_SESSION_ID
        self.session.forget_told(sent)
        return self.session.id


def new_context(
    cache: FetchSessionCache,
    *,
    session_id: int,
    epoch: int,
    requested: list[FetchRequestPartition],
    forgotten: list[TopicPartition],
    privileged: bool,
    now_ms: int,
) -> FetchContext:
    """The context of one Fetch request from its session fields (the table in the module's
    docstring)."""
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if session_id != INVALID_SESSION_ID:
            cache.remove(session_id)
        session = None
        if epoch == INITIAL_EPOCH:
            session = cache.create(requested, privileged=privileged, now_ms=now_ms)
        return FetchContext(wanted=requested, session=session)
    session = cache.get(session_id)
    if session is None:
        return FetchContext(error=ErrorCode.fetch_session_id_not_found)
    if session.epoch != epoch:
        return FetchContext(error=ErrorCode.invalid_fetch_session_epoch)
    session.update(requested, forgotten)
    if not session.partitions:
        cache.remove(session.id)
        return FetchContext(wanted=[])
    cache.touch(session, now_ms)
    session.epoch = next_epoch(session.epoch)
    return FetchContext(wanted=session.requests(), session=session, incremental=True)
