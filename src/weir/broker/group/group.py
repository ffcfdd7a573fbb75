"""One consumer group's membership, generation, chosen protocol and committed offsets.

Holds data and the few rules that need only the group itself (protocol choice, transitions);
the coordinator drives it. Thread-safety (docs/threads.md): event-loop only.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from weir.broker.group.state import EMPTY, GroupState, check_transition

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    deadline_ms: int = 0
    join_waiter: asyncio.Future[Any] | None = None
    sync_waiter: asyncio.Future[Any] | None = None

    def metadata_for(self, protocol: str) -> bytes:
        return next((meta for name, meta in self.protocols if name == protocol), b"")

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None and not self.join_waiter.done()


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    # members told MEMBER_ID_REQUIRED that have not joined yet -> when they are given up on
    pending_members: dict[str, int] = field(default_factory=dict)
    offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    state_timestamp: int = -1
    join_ready_ms: int = 0  # initial rebalance delay: do not complete a join before this
    rebalance_deadline_ms: int = 0

    def transition(self, target: GroupState, now_ms: int) -> None:
        check_transition(self.state, target)
        self.state = target
        self.state_timestamp = now_ms

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """A joining member fits if the type matches and it shares a protocol with everyone."""
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        offered = {name for name, _ in protocols}
        return protocol_type == self.protocol_type and bool(offered & self.candidate_protocols())

    def candidate_protocols(self) -> set[str]:
        """Protocols every current member supports."""
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Each member votes for its most preferred candidate; the most votes wins (Kafka)."""
        candidates = self.candidate_protocols()
        votes: Counter[str] = Counter()
        for member in self.members.values():
            choice = next(name for name, _ in member.protocols if name in candidates)
            votes[choice] += 1
        return max(sorted(candidates), key=lambda name: votes[name])

    def subscribed_topics(self) -> set[str] | None:
        """Topics the consumer members subscribe to (None if the protocol is not 'consumer')."""
        if self.protocol_type != "consumer" or self.protocol is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            topics |= set(_consumer_subscription(member.metadata_for(self.protocol)))
        return topics


def _consumer_subscription(metadata: bytes) -> list[str]:
    """Topics in a consumer protocol subscription: version int16, [topic string], ...
    Malformed metadata (counts or lengths past its end) yields what could be read."""
    if len(metadata) < 6:
        return []
    count = int.from_bytes(metadata[2:6], "big", signed=True)
    position = 6
    topics: list[str] = []
    for _ in range(max(count, 0)):
        if position + 2 > len(metadata):
            break
        length = int.from_bytes(metadata[position : position + 2], "big", signed=True)
        position += 2
        if length < 0 or position + length > len(metadata):
            break
        topics.append(metadata[position : position + length].decode("utf-8", "replace"))
        position += length
    return topics
