"""The group coordinator: Kafka's classic consumer-group protocol, protocol-agnostic.

Members join (JoinGroup), the coordinator waits until every known member has rejoined or the
rebalance timeout passes, picks the protocol all members support, and answers: the leader gets
every member's metadata, the others only the generation. The leader's assignment arrives with
its SyncGroup and is handed to each member's SyncGroup. Heartbeats keep members alive; a member
silent for its session timeout is removed and the group rebalances. Static members
(`group.instance.id`) rejoin under a new member id without a rebalance and fence the old one.

Time comes from the injected clock; `tick()` applies deadlines (the broker calls it periodically,
tests call it after moving a fake clock). Thread-safety (docs/threads.md): event-loop only.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.group.group import CommittedOffset, Group, Member, TopicPartition
from weir.broker.group.records import (
    StoredGroup,
    StoredMember,
    group_key,
    group_value,
    offset_key,
    offset_value,
)
from weir.broker.group.state import COMPLETING, DEAD, EMPTY, PREPARING, STABLE
from weir.broker.group.store import GroupStore
from weir.clock import Clock

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupConfig:
    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3_000
    offsets_topic_partitions: int = 50
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    max_size: int = 2**31 - 1


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool


class GroupCoordinator:
    def __init__(self, config: GroupConfig, clock: Clock, store: GroupStore) -> None:
        self.config = config
        self._clock = clock
        self.store = store
        self.groups: dict[str, Group] = {}
        #: producer id -> group -> offsets committed in its open transaction (TxnOffsetCommit)
        self.pending_txn: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]] = {}
        self._load()

    def _load(self, indexes: list[int] | None = None) -> None:
        state = self.store.load(indexes)
        now = self._clock.monotonic_ms()
        for group_id in set(state.groups) | set(state.offsets):
            group = Group(group_id, offsets=state.offsets.get(group_id, {}))
            stored = state.groups.get(group_id)
            if stored is not None:
                _restore(group, stored, now)
            self.groups[group_id] = group
        for producer_id, by_group in state.pending.items():
            for group_id, offsets in by_group.items():
                pending = self.pending_txn.setdefault(producer_id, {})
                pending.setdefault(group_id, {}).update(offsets)

    def load_partition(self, index: int) -> None:
        """This broker became the coordinator of the groups in `__consumer_offsets` partition
        `index` (it leads it now): read their state from the log."""
        self.unload_partition(index)
        self._load([index])

    def unload_partition(self, index: int) -> None:
        """Another broker coordinates the groups of partition `index` now: forget them here;
        their waiting members hear NOT_COORDINATOR and find the new coordinator."""
        for by_group in self.pending_txn.values():
            for group_id in [g for g in by_group if self.store.partition_for(g) == index]:
                del by_group[group_id]
        for group_id in [g for g in self.groups if self.store.partition_for(g) == index]:
            group = self.groups.pop(group_id)
            for member in list(group.members.values()):
                _fail_waiters(member, ErrorCode.not_coordinator)

    # ---- join ---------------------------------------------------------------------------------

    async def join(self, request: JoinRequest) -> JoinResult:
        if not request.group_id:
            return JoinResult(ErrorCode.invalid_group_id)
        if not self.store.is_coordinator(request.group_id):
            return JoinResult(ErrorCode.not_coordinator)
        timeout = request.session_timeout_ms
        if not self.config.min_session_timeout_ms <= timeout <= self.config.max_session_timeout_ms:
            return JoinResult(ErrorCode.invalid_session_timeout)
        group = self.groups.get(request.group_id)
        if group is None:
            if request.member_id:
                return JoinResult(ErrorCode.unknown_member_id)
            group = self.groups[request.group_id] = Group(request.group_id)
        if group.is_(DEAD):
            return JoinResult(ErrorCode.coordinator_not_available)
        known = request.member_id in group.members
        if not known and not group.supports(request.protocol_type, request.protocols):
            return JoinResult(ErrorCode.inconsistent_group_protocol)
        if not request.member_id:
            return await self._join_new(group, request)
        return await self._join_known(group, request)

    async def _join_new(self, group: Group, request: JoinRequest) -> JoinResult:
        member_id = f"{request.client_id or 'member'}-{uuid.uuid4()}"
        instance = request.group_instance_id
        if instance is not None and group.static_members.get(instance) in group.members:
            return await self._replace_static(
                group, group.static_members[instance], member_id, request
            )
        if len(group.members) >= self.config.max_size:
            return JoinResult(ErrorCode.group_max_size_reached)
        if instance is None and request.require_known_member_id:
            deadline = self._clock.monotonic_ms() + request.session_timeout_ms
            group.pending_members[member_id] = deadline
            return JoinResult(ErrorCode.member_id_required, member_id=member_id)
        return await self._add_and_rebalance(group, member_id, request)

    async def _join_known(self, group: Group, request: JoinRequest) -> JoinResult:
        member_id = request.member_id
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            return await self._add_and_rebalance(group, member_id, request)
        if _fenced(group, member_id, request.group_instance_id):
            return JoinResult(ErrorCode.fenced_instance_id)
        member = group.members.get(member_id)
        if member is None:
            return JoinResult(ErrorCode.unknown_member_id)
        changed = member.protocols != request.protocols
        _update_member(member, request)
        if group.is_(PREPARING):
            return await self._await_join(group, member)
        if group.is_(COMPLETING) and not changed:  # a retry after a lost JoinGroup response
            return self._join_result(group, member, include_members=member_id == group.leader)
        if group.is_(STABLE) and not changed and member_id != group.leader:
            member.deadline_ms = self._clock.monotonic_ms() + member.session_timeout_ms
            return self._join_result(group, member, include_members=False)
        self._prepare_rebalance(group)
        return await self._await_join(group, member)

    async def _add_and_rebalance(
        self, group: Group, member_id: str, request: JoinRequest
    ) -> JoinResult:
        member = Member(member_id, request.group_instance_id, request.client_id,
                        request.client_host, request.session_timeout_ms,
                        request.rebalance_timeout_ms, request.protocol_type,
                        list(request.protocols))  # fmt: skip
        if not group.members:
            group.protocol_type = request.protocol_type
        group.members[member_id] = member
        if request.group_instance_id is not None:
            group.static_members[request.group_instance_id] = member_id
        self._prepare_rebalance(group)
        return await self._await_join(group, member)

    async def _replace_static(
        self, group: Group, old_id: str, new_id: str, request: JoinRequest
    ) -> JoinResult:
        """A static member restarted: it takes over its old identity; no rebalance if Stable."""
        old = group.members.pop(old_id)
        _fail_waiters(old, ErrorCode.fenced_instance_id)
        member = Member(new_id, request.group_instance_id, request.client_id,
                        request.client_host, request.session_timeout_ms,
                        request.rebalance_timeout_ms, request.protocol_type,
                        list(request.protocols), assignment=old.assignment)  # fmt: skip
        group.members[new_id] = member
        assert request.group_instance_id is not None
        group.static_members[request.group_instance_id] = new_id
        if group.leader == old_id:
            group.leader = new_id
        if group.is_(STABLE) and old.protocols == member.protocols:
            member.deadline_ms = self._clock.monotonic_ms() + member.session_timeout_ms
            error = self._persist_group(group)
            if error is not ErrorCode.none:
                return JoinResult(error)
            result = self._join_result(group, member, include_members=False)
            # A restarted static leader is not told it leads: it must not reassign (Kafka).
            return replace(result, leader=old_id) if group.leader == new_id else result
        self._prepare_rebalance(group)
        return await self._await_join(group, member)

    def _prepare_rebalance(self, group: Group) -> None:
        now = self._clock.monotonic_ms()
        if group.is_(COMPLETING):
            for member in group.members.values():
                _fail_waiters(member, ErrorCode.rebalance_in_progress, join=False)
        if group.is_(PREPARING):
            return
        initial = group.is_(EMPTY)
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        group.transition(PREPARING, self._clock.milliseconds())
        group.rebalance_deadline_ms = now + timeout
        delay = min(self.config.initial_rebalance_delay_ms, timeout) if initial else 0
        group.join_ready_ms = now + delay

    async def _await_join(self, group: Group, member: Member) -> JoinResult:
        waiter: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        if member.join_waiter is not None and not member.join_waiter.done():
            member.join_waiter.set_result(JoinResult(ErrorCode.rebalance_in_progress))
        member.join_waiter = waiter
        self._maybe_complete_join(group)
        return await waiter

    def _maybe_complete_join(self, group: Group) -> None:
        if not group.is_(PREPARING):
            return
        now = self._clock.monotonic_ms()
        everyone = all(m.awaiting_join for m in group.members.values())
        ready = everyone and not group.pending_members and now >= group.join_ready_ms
        if ready or now >= group.rebalance_deadline_ms:
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        for member in [m for m in group.members.values() if not m.awaiting_join]:
            self._remove_member(group, member)
        group.pending_members.clear()
        group.generation += 1
        now_ms = self._clock.milliseconds()
        if not group.members:
            group.protocol = group.leader = None
            group.transition(EMPTY, now_ms)
            self._persist_group(group)
            return
        group.protocol = group.select_protocol()
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.transition(COMPLETING, now_ms)
        deadline = self._clock.monotonic_ms()
        for member in group.members.values():
            member.deadline_ms = deadline + member.session_timeout_ms
            result = self._join_result(
                group, member, include_members=member.member_id == group.leader
            )
            assert member.join_waiter is not None
            member.join_waiter.set_result(result)
            member.join_waiter = None

    def _join_result(self, group: Group, member: Member, *, include_members: bool) -> JoinResult:
        members = []
        if include_members and group.protocol is not None:
            members = [(m.member_id, m.group_instance_id, m.metadata_for(group.protocol))
                       for m in group.members.values()]  # fmt: skip
        return JoinResult(
            ErrorCode.none,
            member.member_id,
            group.generation,
            group.protocol_type,
            group.protocol,
            group.leader or "",
            members,
        )

    # ---- sync, heartbeat, leave ---------------------------------------------------------------

    async def sync(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult:
        group, member, error = self._validate_member(group_id, member_id, instance_id, generation)
        if error is not ErrorCode.none:
            return SyncResult(error)
        assert group is not None and member is not None
        if group.is_(PREPARING):
            return SyncResult(ErrorCode.rebalance_in_progress)
        if group.is_(STABLE):
            return self._sync_result(group, member)
        waiter: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        member.sync_waiter = waiter
        if member_id == group.leader:
            self._complete_sync(group, assignments)
        return await waiter

    def _complete_sync(self, group: Group, assignments: dict[str, bytes]) -> None:
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")
        error = self._persist_group(group)
        if error is not ErrorCode.none:
            for member in group.members.values():
                member.assignment = b""
                _fail_waiters(member, error, join=False)
            self._prepare_rebalance(group)
            return
        group.transition(STABLE, self._clock.milliseconds())
        for member in group.members.values():
            if member.sync_waiter is not None and not member.sync_waiter.done():
                member.sync_waiter.set_result(self._sync_result(group, member))
            member.sync_waiter = None

    @staticmethod
    def _sync_result(group: Group, member: Member) -> SyncResult:
        return SyncResult(ErrorCode.none, member.assignment, group.protocol_type, group.protocol)

    def heartbeat(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        group, member, error = self._validate_member(group_id, member_id, instance_id, generation)
        if error is not ErrorCode.none:
            return error
        assert group is not None and member is not None
        member.deadline_ms = self._clock.monotonic_ms() + member.session_timeout_ms
        if group.is_(PREPARING):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(
        self, group_id: str, leaving: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return ErrorCode.none, [ErrorCode.unknown_member_id] * len(leaving)
        errors = []
        for member_id, instance_id in leaving:
            if instance_id is not None:
                static_id = group.static_members.get(instance_id)
                if static_id is None:
                    errors.append(ErrorCode.unknown_member_id)
                    continue
                if member_id and member_id != static_id:
                    errors.append(ErrorCode.fenced_instance_id)
                    continue
                member_id = static_id
            member = group.members.get(member_id)
            if member is None:
                errors.append(ErrorCode.unknown_member_id)
                continue
            self._remove_member(group, member)
            self._rebalance_after_removal(group)
            errors.append(ErrorCode.none)
        return ErrorCode.none, errors

    def _validate_member(
        self, group_id: str, member_id: str, instance_id: str | None, generation: int
    ) -> tuple[Group | None, Member | None, ErrorCode]:
        if not self.store.is_coordinator(group_id):
            return None, None, ErrorCode.not_coordinator
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return None, None, ErrorCode.unknown_member_id
        if instance_id is not None and instance_id not in group.static_members:
            return group, None, ErrorCode.unknown_member_id
        if _fenced(group, member_id, instance_id):
            return group, None, ErrorCode.fenced_instance_id
        member = group.members.get(member_id)
        if member is None:
            return group, None, ErrorCode.unknown_member_id
        if generation != group.generation:
            return group, member, ErrorCode.illegal_generation
        return group, member, ErrorCode.none

    def _remove_member(self, group: Group, member: Member) -> None:
        group.members.pop(member.member_id, None)
        instance = member.group_instance_id
        if instance is not None and group.static_members.get(instance) == member.member_id:
            del group.static_members[instance]
        _fail_waiters(member, ErrorCode.unknown_member_id)
        if group.leader == member.member_id:
            group.leader = next(iter(group.members), None)

    def _rebalance_after_removal(self, group: Group) -> None:
        if group.is_(STABLE) or group.is_(COMPLETING):
            self._prepare_rebalance(group)
        self._maybe_complete_join(group)

    # ---- time ---------------------------------------------------------------------------------

    def tick(self) -> None:
        """Apply deadlines: expire silent members, finish joins whose time is up, expire offsets."""
        now = self._clock.monotonic_ms()
        for group in list(self.groups.values()):
            expired = [m for m in group.members.values()
                       if not m.awaiting_join and m.deadline_ms <= now]  # fmt: skip
            for member in expired:
                log.info("member %s of group %s expired", member.member_id, group.group_id)
                self._remove_member(group, member)
            if expired:
                self._rebalance_after_removal(group)
            abandoned = [m for m, deadline in group.pending_members.items() if deadline <= now]
            for member_id in abandoned:
                del group.pending_members[member_id]
            self._maybe_complete_join(group)
        self._expire_offsets()

    def _expire_offsets(self) -> None:
        cutoff = self._clock.milliseconds() - self.config.offsets_retention_ms
        for group in list(self.groups.values()):
            if group.is_(EMPTY) and group.offsets and group.state_timestamp < cutoff:
                expired = [tp for tp, c in group.offsets.items() if c.commit_timestamp < cutoff]
                self._delete_offsets(group, expired)
                if not group.offsets:
                    self._remove_group(group)

    # ---- offsets ------------------------------------------------------------------------------

    def commit_offsets(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        offsets: dict[TopicPartition, CommittedOffset],
        known_partition: Any,
    ) -> dict[TopicPartition, ErrorCode]:
        """Store offsets for a member of the current generation, or for a simple consumer
        (generation -1, no member id) of a group without members."""
        error = self._check_commit(group_id, generation, member_id, instance_id)
        if error is not ErrorCode.none:
            return dict.fromkeys(offsets, error)
        group = self.groups[group_id]
        results, accepted = self._screen(offsets, known_partition)
        entries = [(offset_key(group_id, t, p), offset_value(c)) for (t, p), c in accepted.items()]
        written = self.store.write(group_id, entries)
        if written is ErrorCode.none:
            group.offsets.update(accepted)
        results.update(dict.fromkeys(accepted, written))
        return results

    def commit_transactional_offsets(
        self,
        group_id: str,
        producer: tuple[int, int],
        generation: int,
        member_id: str,
        instance_id: str | None,
        offsets: dict[TopicPartition, CommittedOffset],
        known_partition: Any,
    ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: offsets of the transaction of `producer` (id, epoch), appended now
        and applied when its COMMIT marker reaches the group's partition. A member id and
        generation (v3+, KIP-447) are checked as for OffsetCommit; without them only the
        producer's epoch is (by the append)."""
        if generation >= 0 or member_id:
            error = self._check_commit(group_id, generation, member_id, instance_id)
        elif not group_id:
            error = ErrorCode.invalid_group_id
        elif not self.store.is_coordinator(group_id):
            error = ErrorCode.not_coordinator
        else:
            error = ErrorCode.none
        if error is not ErrorCode.none:
            return dict.fromkeys(offsets, error)
        results, accepted = self._screen(offsets, known_partition)
        entries = [(offset_key(group_id, t, p), offset_value(c)) for (t, p), c in accepted.items()]
        written = self.store.write(group_id, entries, producer=producer)
        if written is ErrorCode.none:
            pending = self.pending_txn.setdefault(producer[0], {}).setdefault(group_id, {})
            pending.update(accepted)
        results.update(dict.fromkeys(accepted, written))
        return results

    def _screen(
        self, offsets: dict[TopicPartition, CommittedOffset], known_partition: Any
    ) -> tuple[dict[TopicPartition, ErrorCode], dict[TopicPartition, CommittedOffset]]:
        """(refusals, accepted offsets): unknown partitions and oversized metadata refused."""
        results: dict[TopicPartition, ErrorCode] = {}
        accepted: dict[TopicPartition, CommittedOffset] = {}
        for tp, committed in offsets.items():
            if not known_partition(*tp):
                results[tp] = ErrorCode.unknown_topic_or_partition
            elif len(committed.metadata.encode()) > self.config.offset_metadata_max_bytes:
                results[tp] = ErrorCode.offset_metadata_too_large
            else:
                accepted[tp] = committed
        return results, accepted

    def complete_transaction(self, producer_id: int, commit: bool) -> None:
        """A marker of `producer_id` reached `__consumer_offsets`: its pending offsets take
        effect (COMMIT) or are dropped (ABORT)."""
        by_group = self.pending_txn.pop(producer_id, {})
        if not commit:
            return
        now = self._clock.milliseconds()
        for group_id, offsets in by_group.items():
            group = self.groups.get(group_id)
            if group is None:
                group = self.groups[group_id] = Group(group_id, state_timestamp=now)
            group.offsets.update(offsets)

    def has_pending(self, group_id: str, tp: TopicPartition) -> bool:
        """Whether an open transaction has committed offsets for `tp` in the group (OffsetFetch
        with require_stable answers UNSTABLE_OFFSET_COMMIT then, KIP-447)."""
        return any(tp in by_group.get(group_id, ()) for by_group in self.pending_txn.values())

    def _check_commit(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> ErrorCode:
        if not group_id:
            return ErrorCode.invalid_group_id
        if not self.store.is_coordinator(group_id):
            return ErrorCode.not_coordinator
        group = self.groups.get(group_id)
        if generation < 0 and not member_id:
            if group is None:
                self.groups[group_id] = Group(group_id, state_timestamp=self._clock.milliseconds())
                return ErrorCode.none
            return ErrorCode.none if not group.members else ErrorCode.unknown_member_id
        if group is None:
            return ErrorCode.illegal_generation
        group, member, error = self._validate_member(group_id, member_id, instance_id, generation)
        if error is not ErrorCode.none:
            return error
        assert group is not None and member is not None
        if group.is_(COMPLETING):
            return ErrorCode.rebalance_in_progress
        member.deadline_ms = self._clock.monotonic_ms() + member.session_timeout_ms
        return ErrorCode.none

    def fetch_offsets(
        self, group_id: str, partitions: list[TopicPartition] | None
    ) -> dict[TopicPartition, CommittedOffset | None]:
        group = self.groups.get(group_id)
        stored = group.offsets if group is not None else {}
        if partitions is None:
            return dict(stored)
        return {tp: stored.get(tp) for tp in partitions}

    def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return ErrorCode.group_id_not_found, {}
        if group.members and group.protocol_type != "consumer":
            return ErrorCode.non_empty_group, {}
        subscribed = group.subscribed_topics() if group.members else set()
        results = {}
        deletable = []
        for tp in partitions:
            if subscribed and tp[0] in subscribed:
                results[tp] = ErrorCode.group_subscribed_to_topic
            else:
                results[tp] = ErrorCode.none
                deletable.append(tp)
        error = self._delete_offsets(group, deletable)
        if error is not ErrorCode.none:
            return error, {}
        return ErrorCode.none, results

    def _delete_offsets(self, group: Group, partitions: list[TopicPartition]) -> ErrorCode:
        present = [tp for tp in partitions if tp in group.offsets]
        error = self.store.write(group.group_id, [(offset_key(group.group_id, t, p), None)
                                                  for t, p in present])  # fmt: skip
        if error is ErrorCode.none:
            for tp in present:
                del group.offsets[tp]
        return error

    # ---- admin --------------------------------------------------------------------------------

    def delete_group(self, group_id: str) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return ErrorCode.group_id_not_found
        if not group.is_(EMPTY):
            return ErrorCode.non_empty_group
        entries: list[tuple[bytes, bytes | None]] = [
            (offset_key(group_id, t, p), None) for t, p in group.offsets
        ]
        return self._remove_group(group, entries)

    def _remove_group(
        self, group: Group, entries: list[tuple[bytes, bytes | None]] | None = None
    ) -> ErrorCode:
        """Tombstone the group (and `entries`), then forget it: it is Dead."""
        entries = [*(entries or []), (group_key(group.group_id), None)]
        error = self.store.write(group.group_id, entries)
        if error is ErrorCode.none:
            group.transition(DEAD, self._clock.milliseconds())
            del self.groups[group.group_id]
        return error

    def _persist_group(self, group: Group) -> ErrorCode:
        stored = StoredGroup(
            group.protocol_type or "", group.generation, group.protocol, group.leader,
            group.state_timestamp,
            tuple(StoredMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                               m.rebalance_timeout_ms, m.session_timeout_ms,
                               m.metadata_for(group.protocol or ""), m.assignment)
                  for m in group.members.values()),
        )  # fmt: skip
        entry: tuple[bytes, bytes | None] = (group_key(group.group_id), group_value(stored))
        return self.store.write(group.group_id, [entry])


def _restore(group: Group, stored: StoredGroup, now_ms: int) -> None:
    group.protocol_type = stored.protocol_type or None
    group.generation = stored.generation
    group.protocol = stored.protocol
    group.leader = stored.leader
    group.state_timestamp = stored.state_timestamp
    for m in stored.members:
        protocols = [(stored.protocol, m.subscription)] if stored.protocol else []
        member = Member(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.session_timeout_ms,
            m.rebalance_timeout_ms,
            stored.protocol_type,
            protocols,
            m.assignment,
            deadline_ms=now_ms + m.session_timeout_ms,
        )
        group.members[m.member_id] = member
        if m.group_instance_id is not None:
            group.static_members[m.group_instance_id] = m.member_id
    group.state = STABLE if group.members else EMPTY


def _fenced(group: Group, member_id: str, instance_id: str | None) -> bool:
    """A static member whose instance id now belongs to another member id (Kafka's check)."""
    if instance_id is None or instance_id not in group.static_members:
        return False
    return group.static_members[instance_id] != member_id


def _update_member(member: Member, request: JoinRequest) -> None:
    member.protocols = list(request.protocols)
    member.session_timeout_ms = request.session_timeout_ms
    member.rebalance_timeout_ms = request.rebalance_timeout_ms
    member.client_id = request.client_id
    member.client_host = request.client_host


def _fail_waiters(member: Member, error: ErrorCode, *, join: bool = True) -> None:
    if join and member.join_waiter is not None and not member.join_waiter.done():
        member.join_waiter.set_result(JoinResult(error))
    if member.sync_waiter is not None and not member.sync_waiter.done():
        member.sync_waiter.set_result(SyncResult(error))
    if join:
        member.join_waiter = None
    member.sync_waiter = None
