"""Helpers shared by the group coordinator unit tests: a group coordinator on a broker's
storage stack (storage_world.py), and builders for joins, syncs and consumer subscriptions."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode
from storage_world import StorageWorld

from weir.broker.group.coordinator import (
    GroupConfig,
    GroupCoordinator,
    JoinRequest,
    JoinResult,
    SyncResult,
)
from weir.broker.group.group import CommittedOffset, TopicPartition
from weir.broker.group.store import GroupStore

T = TypeVar("T")

OFFSETS_PARTITIONS = 4
SESSION_MS = 10_000
REBALANCE_MS = 30_000
INITIAL_DELAY_MS = 3_000

TEST_GROUP_CONFIG = GroupConfig(
    min_session_timeout_ms=1_000,
    initial_rebalance_delay_ms=INITIAL_DELAY_MS,
    offsets_topic_partitions=OFFSETS_PARTITIONS,
    offsets_retention_ms=60_000,
)


def subscription(topics: Iterable[str], user_data: bytes = b"", version: int = 0) -> bytes:
    """Consumer protocol subscription: version int16, [topic: int16-length string], user data."""
    names = [t.encode() for t in topics]
    out = struct.pack(">hi", version, len(names))
    for name in names:
        out += struct.pack(">h", len(name)) + name
    return out + struct.pack(">i", len(user_data)) + user_data


def join_request(
    group_id: str = "g",
    member_id: str = "",
    *,
    instance: str | None = None,
    protocols: list[tuple[str, bytes]] | None = None,
    protocol_type: str = "consumer",
    session_ms: int = SESSION_MS,
    rebalance_ms: int = REBALANCE_MS,
    require_known: bool = False,
    client_id: str = "client",
) -> JoinRequest:
    return JoinRequest(
        group_id=group_id,
        member_id=member_id,
        group_instance_id=instance,
        client_id=client_id,
        client_host="/127.0.0.1",
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms,
        protocol_type=protocol_type,
        protocols=protocols if protocols is not None else [("range", subscription(["orders"]))],
        require_known_member_id=require_known,
    )


def offset(value: int, metadata: str = "", epoch: int = -1, ts: int = 0) -> CommittedOffset:
    return CommittedOffset(value, epoch, metadata, ts)


async def settle() -> None:
    """Let every runnable task run until it blocks again."""
    for _ in range(10):
        await asyncio.sleep(0)


@dataclass
class GroupWorld(StorageWorld):
    """A group coordinator on a broker's storage (storage_world.py)."""

    config: GroupConfig = TEST_GROUP_CONFIG

    def open_coordinator(self) -> None:
        self.store = GroupStore(self.replicas, self.topics, OFFSETS_PARTITIONS, self.clock)
        self.coordinator = GroupCoordinator(self.config, self.clock, self.store)

    def reopen(self) -> GroupCoordinator:
        self.close()
        self.open()
        return self.coordinator

    def advance(self, ms: int) -> None:
        """Move fake time and apply the coordinator's deadlines, as the broker's ticker does."""
        self.clock.advance(ms)
        self.coordinator.tick()

    # ---- calls into the coordinator ----------------------------------------------------------

    def commit(
        self,
        group_id: str,
        offsets: dict[TopicPartition, CommittedOffset],
        generation: int = -1,
        member_id: str = "",
        instance: str | None = None,
    ) -> dict[TopicPartition, ErrorCode]:
        return self.coordinator.commit_offsets(
            group_id, generation, member_id, instance, offsets, self.replicas.get
        )

    def heartbeat(
        self, member: JoinResult, group_id: str = "g", instance: str | None = None
    ) -> ErrorCode:
        return self.coordinator.heartbeat(group_id, member.generation, member.member_id, instance)


def spawn(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    return asyncio.get_running_loop().create_task(coro)


@dataclass
class StableGroup:
    members: list[JoinResult]
    assignments: dict[str, bytes]

    @property
    def leader(self) -> JoinResult:
        return next(m for m in self.members if m.member_id == m.leader)

    @property
    def followers(self) -> list[JoinResult]:
        return [m for m in self.members if m.member_id != m.leader]


async def form_stable_group(
    world: GroupWorld, requests: list[JoinRequest], group_id: str = "g"
) -> StableGroup:
    """Join every request in the same (initial) rebalance, then sync: leader first."""
    tasks = [spawn(world.coordinator.join(r)) for r in requests]
    await settle()
    world.advance(world.config.initial_rebalance_delay_ms)
    await settle()
    results = [t.result() for t in tasks]
    assert all(r.error is ErrorCode.none for r in results), results
    assignments = {r.member_id: f"assignment-of-{r.member_id}".encode() for r in results}
    ordered = sorted(results, key=lambda r: r.member_id != r.leader)
    for r in ordered:
        synced = await sync(world, r, assignments if r.member_id == r.leader else {}, group_id)
        assert synced.error is ErrorCode.none
    return StableGroup(results, assignments)


async def sync(
    world: GroupWorld,
    member: JoinResult,
    assignments: dict[str, bytes] | None = None,
    group_id: str = "g",
    instance: str | None = None,
) -> SyncResult:
    return await world.coordinator.sync(
        group_id, member.generation, member.member_id, instance, assignments or {}
    )
