"""A follower's side of its fetch session with one leader (KIP-227; Kafka's client-side
`FetchSessionHandler`): which session id and epoch the next Fetch carries, which partitions it
sends (all of them in a full request; in an incremental one only those whose fetch state
changed since the leader last heard of them) and which it asks the leader to forget.

The first request is full with epoch 0, asking for a session. Once the leader answers with a
session id, requests are incremental, each with the next epoch. A top-level
FETCH_SESSION_ID_NOT_FOUND or INVALID_FETCH_SESSION_EPOCH, a response without a session id, or
a failed exchange start again with a full request (naming the old session, so that the leader
closes it, unless the leader did not know it).

Plain state, no I/O: the fetcher builds each request from `next_request` and reports the
outcome with `handle_response` or `handle_error`. Thread-safety: as its fetcher, event-loop only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from weir.broker.fetch_sessions import INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class PartitionFetchState:
    """What a Fetch request says of one partition; a change of any field is sent again."""

    fetch_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int
    log_start_offset: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class SessionRequest:
    """The session part of one Fetch request."""

    session_id: int
    epoch: int
    #: the partitions the request carries
    to_send: dict[TopicPartition, PartitionFetchState]
    #: the partitions the leader is to drop from the session
    to_forget: list[TopicPartition]
    #: every partition the session will hold once the request is answered
    partitions: dict[TopicPartition, PartitionFetchState] = field(repr=False)

    @property
    def full(self) -> bool:
        return self.epoch == INITIAL_EPOCH


class FollowerFetchSession:
    """The session state of one fetcher with one leader."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        #: what the leader's session holds for us, as last acknowledged
        self._partitions: dict[TopicPartition, PartitionFetchState] = {}

    def next_request(self, wanted: dict[TopicPartition, PartitionFetchState]) -> SessionRequest:
        """The session fields and partitions of a request fetching `wanted`."""
        if self.session_id == INVALID_SESSION_ID or self.epoch == INITIAL_EPOCH:
            return SessionRequest(self.session_id, INITIAL_EPOCH, dict(wanted), [], dict(wanted))
        known = self._partitions
        changed = {tp: state for tp, state in wanted.items() if known.get(tp) != state}
        forgotten = [tp for tp in known if tp not in wanted]
        return SessionRequest(self.session_id, self.epoch, changed, forgotten, dict(wanted))

    def handle_response(self, sent: SessionRequest, error: ErrorCode, session_id: int) -> bool:
        """Take in the answer to `sent` (its top-level error and session id). False if the
        response is to be ignored: a session error, after which the next request is full."""
        if error != ErrorCode.none:
            known = error != ErrorCode.fetch_session_id_not_found
            self._restart(keep_id=known)
            return False
        if session_id == INVALID_SESSION_ID:  # none opened, or the leader closed ours
            self._restart(keep_id=False)
            return True
        if sent.full or session_id != self.session_id:
            self.session_id = session_id
            self.epoch = next_epoch(INITIAL_EPOCH)
        else:
            self.epoch = next_epoch(self.epoch)
        self._partitions = sent.partitions
        return True

    def handle_error(self) -> None:
        """The exchange failed (the connection broke): start again with a full request that
        closes the session the leader may still hold."""
        self._restart(keep_id=True)

    def _restart(self, *, keep_id: bool) -> None:
        if not keep_id:
            self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._partitions = {}
