"""The group coordinator's join / sync / heartbeat / leave protocol on fake time, with a real
`__consumer_offsets` on disk underneath."""

from __future__ import annotations

import asyncio
import functools

from group_harness import (
    INITIAL_DELAY_MS,
    SESSION_MS,
    GroupWorld,
    form_stable_group,
    join_request,
    settle,
    spawn,
    subscription,
    sync,
)
from kio.schema.errors import ErrorCode

from weir.broker.group.coordinator import JoinResult
from weir.broker.group.group import CommittedOffset
from weir.broker.group.state import GroupState

SUB = subscription(["orders"])


# ---- join ---------------------------------------------------------------------------------------


def test_member_id_required_round_trip_then_join(world: GroupWorld) -> None:
    async def scenario() -> None:
        first = await world.coordinator.join(join_request(require_known=True, client_id="app"))
        assert first.error is ErrorCode.member_id_required
        assert first.member_id.startswith("app-")
        assert "g" not in world.coordinator.groups or not world.coordinator.groups["g"].members

        task = spawn(world.coordinator.join(join_request(member_id=first.member_id,
                                                         require_known=True)))  # fmt: skip
        await settle()
        assert not task.done()  # held by the initial rebalance delay
        world.advance(INITIAL_DELAY_MS)
        await settle()
        joined = task.result()
        assert joined.error is ErrorCode.none
        assert joined.member_id == first.member_id
        assert joined.generation == 1
        assert joined.leader == first.member_id
        assert joined.protocol_type == "consumer"
        assert joined.protocol == "range"
        assert joined.members == [(first.member_id, None, SUB)]

    asyncio.run(scenario())


def test_static_member_skips_member_id_required(world: GroupWorld) -> None:
    async def scenario() -> None:
        task = spawn(world.coordinator.join(join_request(instance="i-1", require_known=True)))
        await settle()
        world.advance(INITIAL_DELAY_MS)
        await settle()
        assert task.result().error is ErrorCode.none

    asyncio.run(scenario())


def test_two_members_one_generation_leader_gets_all_metadata(world: GroupWorld) -> None:
    async def scenario() -> None:
        sub_a, sub_b = subscription(["orders"], b"a"), subscription(["payments"], b"b")
        a = spawn(world.coordinator.join(join_request(protocols=[("range", sub_a)])))
        b = spawn(world.coordinator.join(join_request(protocols=[("range", sub_b)],
                                                      instance="inst-b")))  # fmt: skip
        await settle()
        world.advance(INITIAL_DELAY_MS)
        await settle()
        ra, rb = a.result(), b.result()
        assert ra.error is rb.error is ErrorCode.none
        assert ra.generation == rb.generation == 1
        assert ra.member_id != rb.member_id
        assert ra.leader == rb.leader
        leader, follower = (ra, rb) if ra.leader == ra.member_id else (rb, ra)
        assert leader.leader in (ra.member_id, rb.member_id)
        assert sorted(leader.members) == sorted(
            [(ra.member_id, None, sub_a), (rb.member_id, "inst-b", sub_b)]
        )
        assert follower.members == []
        assert world.coordinator.groups["g"].state is GroupState.COMPLETING_REBALANCE

    asyncio.run(scenario())


def test_protocol_chosen_by_votes(world: GroupWorld) -> None:
    async def scenario() -> None:
        prefs = [
            [("range", b"1"), ("roundrobin", b"1"), ("sticky", b"1")],
            [("sticky", b"2"), ("roundrobin", b"2"), ("range", b"2")],
            [("sticky", b"3"), ("roundrobin", b"3")],
            [("sticky", b"4"), ("roundrobin", b"4")],
        ]
        tasks = [spawn(world.coordinator.join(join_request(protocols=p))) for p in prefs]
        await settle()
        world.advance(INITIAL_DELAY_MS)
        await settle()
        results = [t.result() for t in tasks]
        # candidates: roundrobin and sticky (not everyone offers range); the first member's
        # vote goes to roundrobin, the other three vote sticky.
        assert {r.protocol for r in results} == {"sticky"}
        leader = next(r for r in results if r.member_id == r.leader)
        assert sorted(meta for _, _, meta in leader.members) == [b"1", b"2", b"3", b"4"]

    asyncio.run(scenario())


def test_inconsistent_protocol_when_nothing_in_common(world: GroupWorld) -> None:
    async def scenario() -> None:
        first = spawn(world.coordinator.join(join_request(protocols=[("range", SUB)])))
        await settle()
        other = await world.coordinator.join(join_request(protocols=[("sticky", SUB)]))
        assert other.error is ErrorCode.inconsistent_group_protocol
        wrong_type = await world.coordinator.join(
            join_request(protocol_type="connect", protocols=[("range", SUB)])
        )
        assert wrong_type.error is ErrorCode.inconsistent_group_protocol
        no_protocols = await world.coordinator.join(join_request(protocols=[]))
        assert no_protocols.error is ErrorCode.inconsistent_group_protocol
        world.advance(INITIAL_DELAY_MS)
        await settle()
        alone = first.result()
        assert alone.error is ErrorCode.none
        assert [m for m, _, _ in alone.members] == [alone.member_id]

    asyncio.run(scenario())


def test_empty_protocol_type_is_inconsistent(world: GroupWorld) -> None:
    async def scenario() -> None:
        result = await world.coordinator.join(join_request(protocol_type=""))
        assert result.error is ErrorCode.inconsistent_group_protocol

    asyncio.run(scenario())


def test_invalid_session_timeout_and_group_id(world: GroupWorld) -> None:
    async def scenario() -> None:
        low = world.config.min_session_timeout_ms - 1
        high = world.config.max_session_timeout_ms + 1
        for session in (low, high):
            result = await world.coordinator.join(join_request(session_ms=session))
            assert result.error is ErrorCode.invalid_session_timeout
        result = await world.coordinator.join(join_request(group_id=""))
        assert result.error is ErrorCode.invalid_group_id

    asyncio.run(scenario())


def test_initial_rebalance_delay_holds_first_join(world: GroupWorld) -> None:
    async def scenario() -> None:
        a = spawn(world.coordinator.join(join_request()))
        await settle()
        world.advance(INITIAL_DELAY_MS - 1)
        await settle()
        assert not a.done()
        b = spawn(world.coordinator.join(join_request()))  # arrives inside the delay
        await settle()
        assert not b.done()
        world.advance(1)
        await settle()
        assert a.result().generation == b.result().generation == 1
        assert len(world.coordinator.groups["g"].members) == 2

    asyncio.run(scenario())


def test_initial_delay_without_tick_does_not_complete(world: GroupWorld) -> None:
    async def scenario() -> None:
        a = spawn(world.coordinator.join(join_request()))
        await settle()
        world.clock.advance(INITIAL_DELAY_MS * 2)  # time passes, but nobody applies deadlines
        await settle()
        assert not a.done()
        world.coordinator.tick()
        await settle()
        assert a.result().error is ErrorCode.none

    asyncio.run(scenario())


def test_join_with_unknown_member_id(world: GroupWorld) -> None:
    async def scenario() -> None:
        no_group = await world.coordinator.join(join_request(group_id="nope", member_id="x"))
        assert no_group.error is ErrorCode.unknown_member_id
        await form_stable_group(world, [join_request()])
        stranger = await world.coordinator.join(join_request(member_id="stranger"))
        assert stranger.error is ErrorCode.unknown_member_id

    asyncio.run(scenario())


# ---- sync ---------------------------------------------------------------------------------------


def test_sync_hands_out_assignments_and_group_becomes_stable(world: GroupWorld) -> None:
    async def scenario() -> None:
        tasks = [spawn(world.coordinator.join(join_request())) for _ in range(3)]
        await settle()
        world.advance(INITIAL_DELAY_MS)
        await settle()
        results = [t.result() for t in tasks]
        leader = next(r for r in results if r.member_id == r.leader)
        assignments = {r.member_id: r.member_id.encode()[::-1] for r in results}
        syncs = {r.member_id: spawn(sync(world, r, assignments if r is leader else {}))
                 for r in results}  # fmt: skip
        await settle()
        for member_id, task in syncs.items():
            synced = task.result()
            assert synced.error is ErrorCode.none
            assert synced.assignment == assignments[member_id]
            assert synced.protocol_type == "consumer"
            assert synced.protocol == "range"
        assert world.coordinator.groups["g"].state is GroupState.STABLE

    asyncio.run(scenario())


def test_follower_sync_waits_for_leader(world: GroupWorld) -> None:
    async def scenario() -> None:
        tasks = [spawn(world.coordinator.join(join_request())) for _ in range(2)]
        await settle()
        world.advance(INITIAL_DELAY_MS)
        await settle()
        leader, follower = sorted((t.result() for t in tasks),
                                  key=lambda r: r.member_id != r.leader)  # fmt: skip
        waiting = spawn(sync(world, follower))
        await settle()
        assert not waiting.done()
        assert world.coordinator.groups["g"].state is GroupState.COMPLETING_REBALANCE
        # the follower's heartbeat keeps it alive while it waits
        assert world.heartbeat(follower) is ErrorCode.none
        assignments = {leader.member_id: b"L", follower.member_id: b"F"}
        assert (await sync(world, leader, assignments)).assignment == b"L"
        await settle()
        assert waiting.result() == (await sync(world, follower))
        assert waiting.result().assignment == b"F"

    asyncio.run(scenario())


def test_member_missing_from_assignment_gets_empty_bytes(world: GroupWorld) -> None:
    async def scenario() -> None:
        tasks = [spawn(world.coordinator.join(join_request())) for _ in range(2)]
        await settle()
        world.advance(INITIAL_DELAY_MS)
        await settle()
        leader, follower = sorted((t.result() for t in tasks),
                                  key=lambda r: r.member_id != r.leader)  # fmt: skip
        await sync(world, leader, {leader.member_id: b"all"})
        synced = await sync(world, follower)
        assert synced.error is ErrorCode.none
        assert synced.assignment == b""

    asyncio.run(scenario())


def test_sync_while_preparing_rebalance(world: GroupWorld) -> None:
    async def scenario() -> None:
        group = await form_stable_group(world, [join_request(), join_request()])
        newcomer = spawn(world.coordinator.join(join_request()))
        await settle()
        synced = await sync(world, group.leader)
        assert synced.error is ErrorCode.rebalance_in_progress
        newcomer.cancel()
        await asyncio.gather(newcomer, return_exceptions=True)

    asyncio.run(scenario())


def test_new_member_during_completing_fails_pending_syncs(world: GroupWorld) -> None:
    async def scenario() -> None:
        tasks = [spawn(world.coordinator.join(join_request())) for _ in range(2)]
        await settle()
        world.advance(INITIAL_DELAY_MS)
        await settle()
        follower = next(t.result() for t in tasks if t.result().member_id != t.result().leader)
        waiting = spawn(sync(world, follower))
        await settle()
        newcomer = spawn(world.coordinator.join(join_request()))
        await settle()
        assert waiting.result().error is ErrorCode.rebalance_in_progress
        assert world.coordinator.groups["g"].state is GroupState.PREPARING_REBALANCE
        newcomer.cancel()
        await asyncio.gather(newcomer, return_exceptions=True)

    asyncio.run(scenario())


def test_retried_join_during_completing_rebalance_returns_current_generation(
    world: GroupWorld,
) -> None:
    """A member whose JoinGroup response was lost retries with the same metadata; Kafka answers
    from the current generation instead of starting another rebalance."""

    async def scenario() -> None:
        tasks = [spawn(world.coordinator.join(join_request())) for _ in range(2)]
        await settle()
        world.advance(INITIAL_DELAY_MS)
        await settle()
        first = [t.result() for t in tasks]
        follower = next(r for r in first if r.member_id != r.leader)
        retried = spawn(world.coordinator.join(join_request(member_id=follower.member_id)))
        await settle()
        assert retried.done(), "a retried join started a new rebalance"
        assert retried.result() == follower
        assert world.coordinator.groups["g"].state is GroupState.COMPLETING_REBALANCE

    asyncio.run(scenario())


# ---- heartbeat ----------------------------------------------------------------------------------


def test_heartbeat_stable_then_rebalance_in_progress(world: GroupWorld) -> None:
    async def scenario() -> None:
        group = await form_stable_group(world, [join_request(), join_request()])
        for member in group.members:
            assert world.heartbeat(member) is ErrorCode.none
        newcomer = spawn(world.coordinator.join(join_request()))
        await settle()
        for member in group.members:
            assert world.heartbeat(member) is ErrorCode.rebalance_in_progress
        rejoins = [spawn(world.coordinator.join(join_request(member_id=m.member_id)))
                   for m in group.members]  # fmt: skip
        await settle()
        results = [newcomer.result()] + [t.result() for t in rejoins]
        assert {r.generation for r in results} == {2}
        assert {r.error for r in results} == {ErrorCode.none}
        assert len(world.coordinator.groups["g"].members) == 3

    asyncio.run(scenario())


def test_silent_member_expires_after_session_timeout(world: GroupWorld) -> None:
    async def scenario() -> None:
        group = await form_stable_group(world, [join_request(), join_request()])
        alive, silent = group.leader, group.followers[0]
        world.advance(SESSION_MS - 4_000)
        assert world.heartbeat(alive) is ErrorCode.none
        world.advance(3_999)
        assert silent.member_id in world.coordinator.groups["g"].members
        world.advance(1)  # the silent member's session timeout has now passed
        g = world.coordinator.groups["g"]
        assert silent.member_id not in g.members
        assert g.state is GroupState.PREPARING_REBALANCE
        assert world.heartbeat(silent) is ErrorCode.unknown_member_id
        assert world.heartbeat(alive) is ErrorCode.rebalance_in_progress
        rejoined = await world.coordinator.join(join_request(member_id=alive.member_id))
        assert rejoined.generation == 2
        assert rejoined.leader == alive.member_id
        assert [m for m, _, _ in rejoined.members] == [alive.member_id]

    asyncio.run(scenario())


def test_expired_leader_hands_leadership_on(world: GroupWorld) -> None:
    async def scenario() -> None:
        group = await form_stable_group(world, [join_request(), join_request()])
        leader, follower = group.leader, group.followers[0]
        world.advance(SESSION_MS // 2)
        world.heartbeat(follower)
        world.advance(SESSION_MS // 2)
        assert leader.member_id not in world.coordinator.groups["g"].members
        rejoined = await world.coordinator.join(join_request(member_id=follower.member_id))
        assert rejoined.leader == follower.member_id
        assert rejoined.members and rejoined.generation == 2

    asyncio.run(scenario())


def test_last_member_expiring_empties_group(world: GroupWorld) -> None:
    async def scenario() -> None:
        await form_stable_group(world, [join_request()])
        world.advance(SESSION_MS)
        g = world.coordinator.groups["g"]
        assert g.state is GroupState.EMPTY
        assert not g.members
        assert g.generation == 2

    asyncio.run(scenario())


def test_rebalance_timeout_drops_members_that_do_not_rejoin(world: GroupWorld) -> None:
    async def scenario() -> None:
        request = functools.partial(join_request, session_ms=60_000, rebalance_ms=10_000)
        group = await form_stable_group(world, [request(), request()])
        staying, lagging = group.leader, group.followers[0]
        newcomer = spawn(world.coordinator.join(request()))
        await settle()
        rejoin = spawn(world.coordinator.join(request(member_id=staying.member_id)))
        await settle()
        world.advance(9_999)
        await settle()
        assert not rejoin.done() and not newcomer.done()
        assert lagging.member_id in world.coordinator.groups["g"].members
        world.advance(1)
        await settle()
        results = [rejoin.result(), newcomer.result()]
        assert {r.generation for r in results} == {2}
        leader = next(r for r in results if r.member_id == r.leader)
        assert sorted(m for m, _, _ in leader.members) == sorted(r.member_id for r in results)
        assert lagging.member_id not in world.coordinator.groups["g"].members
        assert world.heartbeat(lagging) is ErrorCode.unknown_member_id

    asyncio.run(scenario())


def test_heartbeat_and_sync_with_stale_generation(world: GroupWorld) -> None:
    async def scenario() -> None:
        group = await form_stable_group(world, [join_request()])
        old = group.leader
        rejoined = await world.coordinator.join(join_request(member_id=old.member_id))
        assert rejoined.generation == old.generation + 1
        assert world.heartbeat(old) is ErrorCode.illegal_generation
        assert (await sync(world, old)).error is ErrorCode.illegal_generation
        assert world.heartbeat(rejoined) is ErrorCode.none
        future = JoinResult(ErrorCode.none, old.member_id, old.generation + 5)
        assert world.heartbeat(future) is ErrorCode.illegal_generation

    asyncio.run(scenario())


def test_unknown_member_in_heartbeat_and_sync(world: GroupWorld) -> None:
    async def scenario() -> None:
        group = await form_stable_group(world, [join_request()])
        stranger = JoinResult(ErrorCode.none, "stranger", group.leader.generation)
        assert world.heartbeat(stranger) is ErrorCode.unknown_member_id
        assert (await sync(world, stranger)).error is ErrorCode.unknown_member_id
        assert world.heartbeat(stranger, group_id="other") is ErrorCode.unknown_member_id

    asyncio.run(scenario())


def test_follower_rejoin_in_stable_returns_current_generation(world: GroupWorld) -> None:
    async def scenario() -> None:
        group = await form_stable_group(world, [join_request(), join_request()])
        follower = group.followers[0]
        again = await world.coordinator.join(join_request(member_id=follower.member_id))
        assert again.error is ErrorCode.none
        assert again.generation == follower.generation
        assert again.members == []
        assert world.coordinator.groups["g"].state is GroupState.STABLE

    asyncio.run(scenario())


# ---- static membership --------------------------------------------------------------------------


def test_static_member_rejoin_keeps_assignment_and_fences_old_id(world: GroupWorld) -> None:
    async def scenario() -> None:
        group = await form_stable_group(
            world, [join_request(instance="inst-a"), join_request(instance="inst-b")]
        )
        old = group.followers[0]
        instance = "inst-a" if world.coordinator.groups["g"].static_members["inst-a"] == \
            old.member_id else "inst-b"  # fmt: skip
        restarted = await world.coordinator.join(join_request(instance=instance))
        assert restarted.error is ErrorCode.none
        assert restarted.member_id != old.member_id
        assert restarted.generation == old.generation  # no rebalance
        assert restarted.leader == group.leader.member_id
        g = world.coordinator.groups["g"]
        assert g.state is GroupState.STABLE
        assert g.generation == old.generation
        synced = await sync(world, restarted, instance=instance)
        assert synced.assignment == group.assignments[old.member_id]
        assert world.heartbeat(restarted, instance=instance) is ErrorCode.none
        assert world.heartbeat(group.leader) is ErrorCode.none  # others are undisturbed
        # the old incarnation is a zombie: it must be told to shut down, not to rejoin
        assert world.heartbeat(old, instance=instance) is ErrorCode.fenced_instance_id

    asyncio.run(scenario())


def test_static_zombie_rejoin_is_fenced(world: GroupWorld) -> None:
    async def scenario() -> None:
        group = await form_stable_group(
            world, [join_request(instance="inst-a"), join_request(instance="inst-b")]
        )
        old = group.followers[0]
        g = world.coordinator.groups["g"]
        instance = next(i for i, m in g.static_members.items() if m == old.member_id)
        await world.coordinator.join(join_request(instance=instance))
        zombie = await world.coordinator.join(
            join_request(member_id=old.member_id, instance=instance)
        )
        assert zombie.error is ErrorCode.fenced_instance_id
        stale_sync = await sync(world, old, instance=instance)
        assert stale_sync.error is ErrorCode.fenced_instance_id
        stale_commit = world.commit("g", {("orders", 0): CommittedOffset(1, -1, "", 0)},
                                    old.generation, old.member_id, instance)  # fmt: skip
        assert stale_commit == {("orders", 0): ErrorCode.fenced_instance_id}

    asyncio.run(scenario())


def test_static_leader_restart_in_stable_group_is_not_told_to_assign_nothing(
    world: GroupWorld,
) -> None:
    """Kafka never answers "you are the leader" with an empty member list: before KIP-814 it
    names the previous leader id (so the restarted leader does no trivial assignment), since
    KIP-814 it sends the members with skipAssignment."""

    async def scenario() -> None:
        group = await form_stable_group(
            world, [join_request(instance="inst-a"), join_request(instance="inst-b")]
        )
        g = world.coordinator.groups["g"]
        instance = next(i for i, m in g.static_members.items() if m == group.leader.member_id)
        restarted = await world.coordinator.join(join_request(instance=instance))
        assert restarted.error is ErrorCode.none
        assert restarted.generation == group.leader.generation
        told_to_lead = restarted.leader == restarted.member_id
        assert not told_to_lead or len(restarted.members) == 2, restarted

    asyncio.run(scenario())


def test_static_member_with_wrong_instance_id_is_refused(world: GroupWorld) -> None:
    async def scenario() -> None:
        group = await form_stable_group(
            world, [join_request(instance="inst-a"), join_request(instance="inst-b")]
        )
        member = group.leader
        # Kafka's validateCurrentMember: an instance id the group does not know -> unknown
        # member; one that belongs to another member id -> fenced.
        assert world.heartbeat(member, instance="inst-other") is ErrorCode.unknown_member_id
        statics = world.coordinator.groups["g"].static_members
        other = next(i for i, m in statics.items() if m != member.member_id)
        assert world.heartbeat(member, instance=other) is ErrorCode.fenced_instance_id

    asyncio.run(scenario())


# ---- leave --------------------------------------------------------------------------------------


def test_leave_group_batch(world: GroupWorld) -> None:
    async def scenario() -> None:
        group = await form_stable_group(
            world, [join_request(), join_request(instance="inst-b"), join_request()]
        )
        g = world.coordinator.groups["g"]
        static_id = g.static_members["inst-b"]
        others = [m for m in group.members if m.member_id != static_id]
        staying, leaving = others[0], others[1]
        error, per_member = world.coordinator.leave("g", [
            ("bogus-id", "inst-b"),  # wrong member id for that instance
            ("", "inst-b"),  # by instance id alone
            (leaving.member_id, None),
            ("nobody", None),
            ("", "inst-unknown"),
        ])  # fmt: skip
        assert error is ErrorCode.none
        assert per_member == [
            ErrorCode.fenced_instance_id,
            ErrorCode.none,
            ErrorCode.none,
            ErrorCode.unknown_member_id,
            ErrorCode.unknown_member_id,
        ]
        assert set(g.members) == {staying.member_id}
        assert "inst-b" not in g.static_members
        assert g.state is GroupState.PREPARING_REBALANCE
        assert world.heartbeat(staying) is ErrorCode.rebalance_in_progress
        rejoined = await world.coordinator.join(join_request(member_id=staying.member_id))
        assert rejoined.generation == 2
        assert [m for m, _, _ in rejoined.members] == [staying.member_id]

    asyncio.run(scenario())


def test_last_member_leaving_empties_group(world: GroupWorld) -> None:
    async def scenario() -> None:
        group = await form_stable_group(world, [join_request(), join_request()])
        ids: list[tuple[str, str | None]] = [(m.member_id, None) for m in group.members]
        assert world.coordinator.leave("g", ids) == (ErrorCode.none, [ErrorCode.none] * 2)
        g = world.coordinator.groups["g"]
        assert g.state is GroupState.EMPTY
        assert g.generation == 2
        assert g.leader is None and g.protocol is None

    asyncio.run(scenario())


def test_leave_while_others_wait_completes_join(world: GroupWorld) -> None:
    async def scenario() -> None:
        group = await form_stable_group(world, [join_request(), join_request()])
        a, b = group.members
        newcomer = spawn(world.coordinator.join(join_request()))
        rejoin_a = spawn(world.coordinator.join(join_request(member_id=a.member_id)))
        await settle()
        assert not rejoin_a.done()
        world.coordinator.leave("g", [(b.member_id, None)])  # the one everybody waits for
        await settle()
        assert rejoin_a.result().generation == newcomer.result().generation == 2

    asyncio.run(scenario())


def test_leave_unknown_group(world: GroupWorld) -> None:
    _, per_member = world.coordinator.leave("nope", [("m", None), ("n", "inst")])
    assert per_member == [ErrorCode.unknown_member_id] * 2


# ---- MEMBER_ID_REQUIRED leftovers ---------------------------------------------------------------


def test_abandoned_member_id_required_does_not_stall_rebalance(world: GroupWorld) -> None:
    """Kafka expires a pending (MEMBER_ID_REQUIRED) member after its session timeout, so a
    client that never comes back cannot hold a rebalance until the rebalance timeout."""

    async def scenario() -> None:
        request = functools.partial(join_request, session_ms=SESSION_MS, rebalance_ms=300_000)
        group = await form_stable_group(world, [request()])
        member = group.leader
        pending = await world.coordinator.join(request(require_known=True))
        assert pending.error is ErrorCode.member_id_required  # ... and the client goes away
        changed = [("range", b"new metadata")]  # a rejoin that forces a rebalance
        rejoin = spawn(world.coordinator.join(request(member_id=member.member_id,
                                                      protocols=changed)))  # fmt: skip
        await settle()
        world.advance(SESSION_MS + 1)
        await settle()
        assert rejoin.done(), "rebalance still waits for a member that never joined"
        assert rejoin.result().generation == 2

    asyncio.run(scenario())
