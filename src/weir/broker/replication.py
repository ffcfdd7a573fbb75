"""A leader's view of its followers: where each one's log ends, who is in sync, and the high
watermark that follows from it (Kafka's replication protocol, SEEDS.md §2).

- A follower's fetch offset is its log end offset: every fetch from a follower moves it on.
- The high watermark is the smallest log end offset over the ISR (the leader included), and over
  any follower a pending ISR change would remove too: until the controller has accepted a shrink
  the leader counts the old members, so the high watermark never runs ahead of a replica that
  may still become leader.
- A follower is caught up when it has fetched up to the leader's log end offset, or up to the
  one the leader had at its previous fetch (Kafka's rule); one that has not been caught up for
  `replica.lag.time.max.ms` is proposed for removal from the ISR, and one
  outside the ISR that reaches the high watermark (and the leader's current epoch) is proposed
  for joining it. Proposals go to the controller (AlterPartition); the ISR changes only when it
  answers.

Pure bookkeeping on one partition: no I/O, time passed in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

UNKNOWN = -1


@dataclass(slots=True)
class LeaderState:
    node_id: int
    replicas: tuple[int, ...]
    isr: frozenset[int]
    #: the controller's version of this partition's state (zkVersion); AlterPartition names it
    partition_epoch: int
    #: the offset this leader's epoch starts at: a follower joins the ISR only past it
    epoch_start_offset: int
    started_ms: int
    follower_end: dict[int, int] = field(default_factory=dict)
    caught_up_ms: dict[int, int] = field(default_factory=dict)
    #: per follower: the leader's log end offset and the time at its previous fetch
    previous_fetch: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: an ISR sent to the controller and not answered yet
    pending_isr: frozenset[int] | None = None

    def __post_init__(self) -> None:
        for replica in self.replicas:
            if replica != self.node_id:
                self.follower_end.setdefault(replica, UNKNOWN)
                # Kafka's grace: a follower counts as caught up when leadership starts
                self.caught_up_ms.setdefault(replica, self.started_ms)

    @property
    def counted(self) -> frozenset[int]:
        """The replicas the high watermark waits for: the ISR and any pending one."""
        if self.pending_isr is None:
            return self.isr
        return self.isr | self.pending_isr

    def follower_fetched(self, replica: int, offset: int, leader_end: int, now_ms: int) -> None:
        """A fetch from `replica` at `offset` (its log end). It is caught up as of now if it
        has everything, or as of its previous fetch if it now has what the leader had then
        (so a follower that keeps up under steady writes is never taken for a laggard)."""
        if replica not in self.follower_end:
            return
        self.follower_end[replica] = offset
        previous = self.previous_fetch.get(replica)
        if offset >= leader_end:
            self.caught_up_ms[replica] = now_ms
        elif previous is not None and offset >= previous[0]:
            self.caught_up_ms[replica] = max(self.caught_up_ms.get(replica, 0), previous[1])
        self.previous_fetch[replica] = (leader_end, now_ms)

    def high_watermark(self, leader_end: int) -> int:
        ends = [leader_end]
        for replica in self.counted:
            if replica != self.node_id:
                ends.append(self.follower_end.get(replica, UNKNOWN))
        return min(ends)

    def isr_to_propose(
        self, high_watermark: int, now_ms: int, lag_max_ms: int
    ) -> frozenset[int] | None:
        """A new ISR to send to the controller, or None (nothing to change, or a change is
        already in flight)."""
        if self.pending_isr is not None:
            return None
        isr = set(self.isr)
        for replica in self.replicas:
            if replica == self.node_id:
                continue
            end = self.follower_end.get(replica, UNKNOWN)
            if replica in isr:
                if now_ms - self.caught_up_ms.get(replica, 0) > lag_max_ms:
                    isr.discard(replica)
            elif end >= high_watermark and end >= self.epoch_start_offset and end != UNKNOWN:
                isr.add(replica)
        isr.add(self.node_id)
        proposed = frozenset(isr)
        return None if proposed == self.isr else proposed


def preferred_read_replica(
    state: LeaderState,
    fetch_offset: int,
    client_rack: str,
    racks: Mapping[int, str | None],
) -> int:
    """The replica a consumer in `client_rack` should read from at `fetch_offset`: the leader
    (its own node id) if the leader is in that rack or no in-sync replica there has the offset,
    else the in-sync replica there that has replicated furthest (lowest node id on a tie)."""
    if not client_rack or racks.get(state.node_id) == client_rack:
        return state.node_id
    candidates = [
        (state.follower_end.get(replica, UNKNOWN), -replica)
        for replica in state.isr
        if replica != state.node_id
        and racks.get(replica) == client_rack
        and state.follower_end.get(replica, UNKNOWN) >= fetch_offset
    ]
    if not candidates:
        return state.node_id
    return -max(candidates)[1]
