"""Group state survives a restart: everything is read back from `__consumer_offsets` on disk."""

from __future__ import annotations

import asyncio
import logging

import pytest
from group_harness import (
    GroupWorld,
    StableGroup,
    form_stable_group,
    join_request,
    offset,
    subscription,
    sync,
)
from kio.schema.errors import ErrorCode

from weir.broker.group.state import GroupState
from weir.broker.group.store import OFFSETS_TOPIC

ORDERS_0, ORDERS_1, ORDERS_2 = ("orders", 0), ("orders", 1), ("orders", 2)
PAYMENTS_0 = ("payments", 0)
SUB_A = subscription(["orders"], b"a")
SUB_B = subscription(["orders", "payments"], b"b")


async def _stable_pair(world: GroupWorld) -> StableGroup:
    return await form_stable_group(world, [
        join_request(instance="inst-a", protocols=[("range", SUB_A)], client_id="app-a"),
        join_request(protocols=[("range", SUB_B)], client_id="app-b"),
    ])  # fmt: skip


def test_offsets_and_stable_group_survive_restart(world: GroupWorld) -> None:
    async def before() -> StableGroup:
        group = await _stable_pair(world)
        leader = group.leader
        world.commit("g", {ORDERS_0: offset(10, "m0", 2, 111), ORDERS_1: offset(11)},
                     leader.generation, leader.member_id)  # fmt: skip
        world.commit("simple", {PAYMENTS_0: offset(5, "simple", ts=222)})
        return group

    group = asyncio.run(before())
    old = world.coordinator.groups["g"]
    snapshot = (old.generation, old.protocol_type, old.protocol, old.leader,
                dict(old.static_members))  # fmt: skip

    members_before = {
        member_id: (m.group_instance_id, m.client_id, m.session_timeout_ms,
                    m.rebalance_timeout_ms, m.metadata_for("range"))
        for member_id, m in old.members.items()
    }  # fmt: skip

    coordinator = world.reopen()
    g = coordinator.groups["g"]
    assert g is not old
    assert (g.generation, g.protocol_type, g.protocol, g.leader, g.static_members) == snapshot
    assert g.state is GroupState.STABLE
    assert {
        member_id: (m.group_instance_id, m.client_id, m.session_timeout_ms,
                    m.rebalance_timeout_ms, m.metadata_for("range"))
        for member_id, m in g.members.items()
    } == members_before  # fmt: skip
    assert {m: x.assignment for m, x in g.members.items()} == group.assignments
    assert coordinator.fetch_offsets("g", None) == {
        ORDERS_0: offset(10, "m0", 2, 111),
        ORDERS_1: offset(11),
    }
    assert coordinator.fetch_offsets("simple", None) == {PAYMENTS_0: offset(5, "simple", ts=222)}

    async def after() -> None:
        # the members carry on where they were: same generation, same assignment
        for member in group.members:
            instance = "inst-a" if g.static_members.get("inst-a") == member.member_id else None
            assert world.heartbeat(member, instance=instance) is ErrorCode.none
            synced = await sync(world, member, instance=instance)
            assert synced.error is ErrorCode.none
            assert synced.assignment == group.assignments[member.member_id]
        leader = group.leader
        assert world.commit("g", {ORDERS_2: offset(1)}, leader.generation,
                            leader.member_id) == {ORDERS_2: ErrorCode.none}  # fmt: skip

    asyncio.run(after())


def test_restored_subscriptions_still_protect_offsets(world: GroupWorld) -> None:
    async def before() -> None:
        group = await _stable_pair(world)
        leader = group.leader
        world.commit("g", {ORDERS_0: offset(1)}, leader.generation, leader.member_id)

    asyncio.run(before())
    coordinator = world.reopen()
    error, results = coordinator.delete_offsets("g", [ORDERS_0])
    assert (error, results) == (ErrorCode.none, {ORDERS_0: ErrorCode.group_subscribed_to_topic})


def test_restored_members_still_expire(world: GroupWorld) -> None:
    asyncio.run(_stable_pair(world))
    coordinator = world.reopen()
    world.advance(max(m.session_timeout_ms for m in coordinator.groups["g"].members.values()))
    g = coordinator.groups["g"]
    assert not g.members
    assert g.state is GroupState.EMPTY


def test_empty_group_generation_survives_restart(world: GroupWorld) -> None:
    async def before() -> None:
        group = await _stable_pair(world)
        world.coordinator.leave("g", [(m.member_id, None) for m in group.members])

    asyncio.run(before())
    generation = world.coordinator.groups["g"].generation
    assert generation == 2
    g = world.reopen().groups["g"]
    assert g.state is GroupState.EMPTY
    assert g.generation == generation
    assert not g.members

    async def rejoin() -> None:
        group = await form_stable_group(world, [join_request()])
        assert group.leader.generation == generation + 1

    asyncio.run(rejoin())


def test_static_replacement_survives_restart(world: GroupWorld) -> None:
    async def before() -> str:
        await _stable_pair(world)
        restarted = await world.coordinator.join(
            join_request(instance="inst-a", protocols=[("range", SUB_A)], client_id="app-a")
        )
        assert restarted.error is ErrorCode.none
        return restarted.member_id

    new_id = asyncio.run(before())
    g = world.reopen().groups["g"]
    assert g.static_members == {"inst-a": new_id}
    assert new_id in g.members
    assert g.generation == 1


def test_deleted_group_and_offsets_stay_deleted(world: GroupWorld) -> None:
    async def before() -> None:
        group = await _stable_pair(world)
        world.coordinator.leave("g", [(m.member_id, None) for m in group.members])
        world.commit("g", {ORDERS_0: offset(1)})
        assert world.coordinator.delete_group("g") is ErrorCode.none

    asyncio.run(before())
    world.commit("simple", {ORDERS_0: offset(1), ORDERS_1: offset(2), PAYMENTS_0: offset(3)})
    assert world.coordinator.delete_offsets("simple", [ORDERS_1, PAYMENTS_0])[0] is ErrorCode.none
    world.commit("gone", {ORDERS_2: offset(9)})
    assert world.coordinator.delete_group("gone") is ErrorCode.none
    world.commit("reborn", {ORDERS_0: offset(1)})
    world.coordinator.delete_group("reborn")
    world.commit("reborn", {ORDERS_1: offset(2)})  # used again after its deletion

    coordinator = world.reopen()
    assert "g" not in coordinator.groups
    assert "gone" not in coordinator.groups
    assert coordinator.fetch_offsets("g", None) == {}
    assert coordinator.fetch_offsets("gone", None) == {}
    assert coordinator.fetch_offsets("simple", None) == {ORDERS_0: offset(1)}
    assert coordinator.fetch_offsets("reborn", None) == {ORDERS_1: offset(2)}
    assert coordinator.delete_group("g") is ErrorCode.group_id_not_found


def test_expired_offsets_stay_expired(world: GroupWorld) -> None:
    now = world.clock.milliseconds()
    world.commit("simple", {ORDERS_0: offset(1, ts=now)})
    world.advance(world.config.offsets_retention_ms + 1)
    world.commit("simple", {ORDERS_1: offset(2, ts=world.clock.milliseconds())})
    assert set(world.coordinator.fetch_offsets("simple", None)) == {ORDERS_1}
    coordinator = world.reopen()
    assert set(coordinator.fetch_offsets("simple", None)) == {ORDERS_1}


def test_offsets_topic_created_on_first_write_with_compaction(world: GroupWorld) -> None:
    assert world.metadata.topic(OFFSETS_TOPIC) is None
    world.commit("simple", {ORDERS_0: offset(1)})
    info = world.metadata.topic(OFFSETS_TOPIC)
    assert info is not None
    assert info.partitions == world.store.partitions
    assert info.configs["cleanup.policy"] == "compact"
    partition = world.store.partition_for("simple")
    assert world.replicas.get(OFFSETS_TOPIC, partition) is not None
    assert world.replicas.get(OFFSETS_TOPIC, partition).log.high_watermark == 1  # type: ignore[union-attr]
    world.reopen()
    assert world.store.partitions == info.partitions


def test_an_offsets_topic_of_another_size_places_groups_by_its_own_partitions(
    world: GroupWorld, caplog: pytest.LogCaptureFixture
) -> None:
    """`__consumer_offsets` made after the coordinator started, with fewer partitions than
    offsets.topic.num.partitions (by an older weir, or under another setting): every group's
    commits land in one of its partitions and are read back after a restart."""
    world.topics.create_now(OFFSETS_TOPIC, 1, {"cleanup.policy": "compact"})
    groups = [f"group-{i}" for i in range(8)]
    with caplog.at_level(logging.WARNING, logger="weir.broker.topics"):
        for number, group_id in enumerate(groups):
            assert world.commit(group_id, {ORDERS_0: offset(number)}) == {ORDERS_0: ErrorCode.none}
    assert {world.store.partition_for(g) for g in groups} == {0}
    assert "offsets.topic.num.partitions=4" in caplog.text
    coordinator = world.reopen()
    assert [coordinator.fetch_offsets(g, None)[ORDERS_0].offset for g in groups] == list(range(8))
