"""Offset commits, fetches, deletion, group deletion and offset retention in the coordinator."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from group_harness import (
    GroupWorld,
    form_stable_group,
    join_request,
    offset,
    settle,
    spawn,
    subscription,
)
from kio.schema.errors import ErrorCode

from weir.broker.group.group import CommittedOffset
from weir.broker.group.state import GroupState

ORDERS_0, ORDERS_1, PAYMENTS_0 = ("orders", 0), ("orders", 1), ("payments", 0)


# ---- commits ------------------------------------------------------------------------------------


def test_simple_commit_on_group_without_members(world: GroupWorld) -> None:
    committed = offset(42, "note", epoch=3, ts=world.clock.milliseconds())
    assert world.commit("simple", {ORDERS_0: committed}) == {ORDERS_0: ErrorCode.none}
    assert world.coordinator.fetch_offsets("simple", [ORDERS_0, ORDERS_1]) == {
        ORDERS_0: committed,
        ORDERS_1: None,
    }
    assert world.coordinator.fetch_offsets("simple", None) == {ORDERS_0: committed}
    assert world.coordinator.groups["simple"].state is GroupState.EMPTY


def test_later_commit_replaces_earlier(world: GroupWorld) -> None:
    world.commit("simple", {ORDERS_0: offset(1)})
    world.commit("simple", {ORDERS_0: offset(2, "second")})
    assert world.coordinator.fetch_offsets("simple", [ORDERS_0])[ORDERS_0] == offset(2, "second")


def test_fetch_for_unknown_group(world: GroupWorld) -> None:
    assert world.coordinator.fetch_offsets("nobody", [ORDERS_0]) == {ORDERS_0: None}
    assert world.coordinator.fetch_offsets("nobody", None) == {}


def test_member_commit_in_stable_group(world: GroupWorld) -> None:
    async def scenario() -> None:
        group = await form_stable_group(world, [join_request(), join_request()])
        for member in group.members:
            result = world.commit("g", {ORDERS_0: offset(7)}, member.generation, member.member_id)
            assert result == {ORDERS_0: ErrorCode.none}
        assert world.coordinator.fetch_offsets("g", [ORDERS_0])[ORDERS_0] == offset(7)

    asyncio.run(scenario())


def test_simple_commit_refused_while_group_has_members(world: GroupWorld) -> None:
    async def scenario() -> None:
        await form_stable_group(world, [join_request()])
        result = world.commit("g", {ORDERS_0: offset(1)})
        assert result == {ORDERS_0: ErrorCode.unknown_member_id}
        assert world.coordinator.fetch_offsets("g", [ORDERS_0]) == {ORDERS_0: None}

    asyncio.run(scenario())


def test_commit_from_stale_generation_is_rejected(world: GroupWorld) -> None:
    async def scenario() -> None:
        group = await form_stable_group(world, [join_request()])
        old = group.leader
        world.commit("g", {ORDERS_0: offset(5)}, old.generation, old.member_id)
        rejoined = await world.coordinator.join(join_request(member_id=old.member_id))
        assert rejoined.generation == old.generation + 1
        stale = world.commit("g", {ORDERS_0: offset(99), ORDERS_1: offset(99)},
                             old.generation, old.member_id)  # fmt: skip
        assert stale == dict.fromkeys([ORDERS_0, ORDERS_1], ErrorCode.illegal_generation)
        assert world.coordinator.fetch_offsets("g", [ORDERS_0, ORDERS_1]) == {
            ORDERS_0: offset(5),
            ORDERS_1: None,
        }

    asyncio.run(scenario())


def test_commit_from_unknown_member_or_unknown_group(world: GroupWorld) -> None:
    async def scenario() -> None:
        group = await form_stable_group(world, [join_request()])
        generation = group.leader.generation
        assert world.commit("g", {ORDERS_0: offset(1)}, generation, "stranger") == {
            ORDERS_0: ErrorCode.unknown_member_id
        }
        assert world.commit("nope", {ORDERS_0: offset(1)}, 3, "someone") == {
            ORDERS_0: ErrorCode.illegal_generation
        }
        assert world.commit("", {ORDERS_0: offset(1)}) == {ORDERS_0: ErrorCode.invalid_group_id}

    asyncio.run(scenario())


def test_commit_while_completing_rebalance(world: GroupWorld) -> None:
    async def scenario() -> None:
        task = spawn(world.coordinator.join(join_request()))
        await settle()
        world.advance(world.config.initial_rebalance_delay_ms)
        await settle()
        member = task.result()
        result = world.commit("g", {ORDERS_0: offset(1)}, member.generation, member.member_id)
        assert result == {ORDERS_0: ErrorCode.rebalance_in_progress}

    asyncio.run(scenario())


def test_commit_while_preparing_rebalance_is_accepted(world: GroupWorld) -> None:
    async def scenario() -> None:
        group = await form_stable_group(world, [join_request()])
        member = group.leader
        newcomer = spawn(world.coordinator.join(join_request()))
        await settle()
        assert world.coordinator.groups["g"].state is GroupState.PREPARING_REBALANCE
        result = world.commit("g", {ORDERS_0: offset(8)}, member.generation, member.member_id)
        assert result == {ORDERS_0: ErrorCode.none}
        newcomer.cancel()
        await asyncio.gather(newcomer, return_exceptions=True)

    asyncio.run(scenario())


def test_commit_for_unknown_partitions(world: GroupWorld) -> None:
    result = world.commit("simple", {
        ORDERS_0: offset(1),
        ("orders", 3): offset(1),  # orders has partitions 0..2
        ("no-such-topic", 0): offset(1),
    })  # fmt: skip
    assert result == {
        ORDERS_0: ErrorCode.none,
        ("orders", 3): ErrorCode.unknown_topic_or_partition,
        ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
    }
    assert world.coordinator.fetch_offsets("simple", None) == {ORDERS_0: offset(1)}


def test_metadata_over_limit_is_too_large(make_world: Callable[..., GroupWorld]) -> None:
    world = make_world(offset_metadata_max_bytes=10)
    at_limit = "é" * 5  # 10 UTF-8 bytes
    over = "é" * 5 + "x"
    result = world.commit("simple", {ORDERS_0: offset(1, at_limit), ORDERS_1: offset(1, over)})
    assert result == {ORDERS_0: ErrorCode.none, ORDERS_1: ErrorCode.offset_metadata_too_large}
    assert world.coordinator.fetch_offsets("simple", None) == {ORDERS_0: offset(1, at_limit)}


# ---- deleting groups ----------------------------------------------------------------------------


def test_delete_group_only_when_empty(world: GroupWorld) -> None:
    async def scenario() -> None:
        group = await form_stable_group(world, [join_request()])
        member = group.leader
        world.commit("g", {ORDERS_0: offset(3)}, member.generation, member.member_id)
        assert world.coordinator.delete_group("g") is ErrorCode.non_empty_group
        assert world.coordinator.fetch_offsets("g", [ORDERS_0])[ORDERS_0] == offset(3)
        world.coordinator.leave("g", [(member.member_id, None)])
        assert world.coordinator.groups["g"].state is GroupState.EMPTY
        assert world.coordinator.delete_group("g") is ErrorCode.none
        assert "g" not in world.coordinator.groups
        assert world.coordinator.fetch_offsets("g", [ORDERS_0]) == {ORDERS_0: None}
        assert world.coordinator.delete_group("g") is ErrorCode.group_id_not_found

    asyncio.run(scenario())


def test_delete_unknown_group(world: GroupWorld) -> None:
    assert world.coordinator.delete_group("never-seen") is ErrorCode.group_id_not_found


def test_delete_simple_group(world: GroupWorld) -> None:
    world.commit("simple", {ORDERS_0: offset(3)})
    assert world.coordinator.delete_group("simple") is ErrorCode.none
    assert world.coordinator.fetch_offsets("simple", None) == {}


def test_deleted_group_can_be_used_again(world: GroupWorld) -> None:
    async def scenario() -> None:
        world.commit("g", {ORDERS_0: offset(3)})
        world.coordinator.delete_group("g")
        group = await form_stable_group(world, [join_request()])
        assert group.leader.generation == 1

    asyncio.run(scenario())


# ---- deleting offsets ---------------------------------------------------------------------------


def test_delete_offsets_refuses_subscribed_topics(world: GroupWorld) -> None:
    async def scenario() -> None:
        orders_sub = subscription(["orders"], user_data=b"\x00\x01")
        group = await form_stable_group(world, [
            join_request(protocols=[("range", orders_sub)]),
            join_request(protocols=[("range", subscription(["orders", "audit"]))]),
        ])  # fmt: skip
        member = group.leader
        committed = {ORDERS_0: offset(1), ORDERS_1: offset(2), PAYMENTS_0: offset(3)}
        world.commit("g", committed, member.generation, member.member_id)
        error, results = world.coordinator.delete_offsets("g", [ORDERS_0, PAYMENTS_0])
        assert error is ErrorCode.none
        assert results == {
            ORDERS_0: ErrorCode.group_subscribed_to_topic,
            PAYMENTS_0: ErrorCode.none,
        }
        assert world.coordinator.fetch_offsets("g", None) == {
            ORDERS_0: offset(1),
            ORDERS_1: offset(2),
        }

    asyncio.run(scenario())


def test_delete_offsets_of_empty_group(world: GroupWorld) -> None:
    async def scenario() -> None:
        group = await form_stable_group(world, [join_request()])
        member = group.leader
        world.commit("g", {ORDERS_0: offset(1), ORDERS_1: offset(2)},
                     member.generation, member.member_id)  # fmt: skip
        world.coordinator.leave("g", [(member.member_id, None)])
        error, results = world.coordinator.delete_offsets("g", [ORDERS_0, PAYMENTS_0])
        assert error is ErrorCode.none
        assert results == {ORDERS_0: ErrorCode.none, PAYMENTS_0: ErrorCode.none}
        assert world.coordinator.fetch_offsets("g", None) == {ORDERS_1: offset(2)}

    asyncio.run(scenario())


def test_delete_offsets_of_unknown_group(world: GroupWorld) -> None:
    assert world.coordinator.delete_offsets("nope", [ORDERS_0]) == (
        ErrorCode.group_id_not_found,
        {},
    )


def test_delete_offsets_of_non_consumer_group_with_members(world: GroupWorld) -> None:
    """Kafka (GroupCoordinator.handleDeleteOffsets): a group that is not Empty and does not use
    the consumer protocol answers NON_EMPTY_GROUP, because its subscriptions are opaque."""

    async def scenario() -> None:
        group = await form_stable_group(
            world, [join_request(protocol_type="connect", protocols=[("sessioned", b"opaque")])]
        )
        member = group.leader
        world.commit("g", {ORDERS_0: offset(1)}, member.generation, member.member_id)
        error, _ = world.coordinator.delete_offsets("g", [ORDERS_0])
        assert error is ErrorCode.non_empty_group
        assert world.coordinator.fetch_offsets("g", [ORDERS_0])[ORDERS_0] == offset(1)

    asyncio.run(scenario())


# ---- retention ----------------------------------------------------------------------------------


def _at(world: GroupWorld, value: int) -> CommittedOffset:
    return offset(value, ts=world.clock.milliseconds())


def test_offsets_of_simple_group_expire_after_retention(world: GroupWorld) -> None:
    retention = world.config.offsets_retention_ms
    world.commit("simple", {ORDERS_0: _at(world, 1)})
    world.advance(retention // 2)
    world.commit("simple", {ORDERS_1: _at(world, 2)})
    world.advance(retention // 2)  # ORDERS_0 is exactly retention old: kept
    assert set(world.coordinator.fetch_offsets("simple", None)) == {ORDERS_0, ORDERS_1}
    world.advance(1)
    assert set(world.coordinator.fetch_offsets("simple", None)) == {ORDERS_1}
    world.advance(retention // 2)
    assert world.coordinator.fetch_offsets("simple", None) == {}


def test_retention_of_consumer_group_counts_from_when_it_became_empty(
    world: GroupWorld,
) -> None:
    retention = world.config.offsets_retention_ms

    async def scenario() -> None:
        group = await form_stable_group(world, [join_request(session_ms=600_000)])
        member = group.leader
        world.commit("g", {ORDERS_0: _at(world, 1)}, member.generation, member.member_id)
        world.advance(retention * 2)  # stable group: its offsets stay however old they are
        assert world.heartbeat(member) is ErrorCode.none
        assert set(world.coordinator.fetch_offsets("g", None)) == {ORDERS_0}
        world.coordinator.leave("g", [(member.member_id, None)])
        assert world.coordinator.groups["g"].state is GroupState.EMPTY
        world.advance(retention)
        assert set(world.coordinator.fetch_offsets("g", None)) == {ORDERS_0}
        world.advance(1)
        assert world.coordinator.fetch_offsets("g", None) == {}

    asyncio.run(scenario())


def test_group_whose_offsets_all_expired_is_removed(world: GroupWorld) -> None:
    """Kafka (GroupMetadataManager.cleanupGroupMetadata): an Empty group left without offsets
    becomes Dead, leaves the cache (ListGroups no longer shows it) and gets a tombstone."""

    async def scenario() -> None:
        group = await form_stable_group(world, [join_request()])
        member = group.leader
        world.commit("g", {ORDERS_0: _at(world, 1)}, member.generation, member.member_id)
        world.coordinator.leave("g", [(member.member_id, None)])

    asyncio.run(scenario())
    world.commit("simple", {ORDERS_0: _at(world, 1)})
    world.advance(world.config.offsets_retention_ms + 1)
    assert world.coordinator.fetch_offsets("g", None) == {}
    assert "g" not in world.coordinator.groups
    assert "simple" not in world.coordinator.groups
    assert "g" not in world.reopen().groups
