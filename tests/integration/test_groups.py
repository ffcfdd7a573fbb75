"""Consumer groups against a real broker, with confluent-kafka, kafka-python and aiokafka:
rebalances as members join, leave and die, cooperative and static membership, committed offsets
through a kill -9, bad group requests, and the group admin API."""

from __future__ import annotations

import itertools
import struct
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    ConsumerGroupDescription,
    MemberDescription,
    NewTopic,
)
from group_clients import CLIENTS, ConsumerProcess, stop_all
from group_raw import RawMember, consumer_assignment, consumer_subscription
from kio.schema.errors import ErrorCode

from waiting import poll

with warnings.catch_warnings():
    # kafka-python 3.0.12 reads its protocol schemas with the deprecated
    # importlib.resources.read_text (which calls open_text) while importing
    warnings.filterwarnings("ignore", "(read|open)_text is deprecated", DeprecationWarning)
    import kafka
    import kafka.errors
    from kafka.admin import KafkaAdminClient

TIMEOUT = 30
#: A short session timeout, allowed by lowering the broker's minimum: a killed member is noticed
#: within seconds.
SESSION_MS = 3000
#: The shared broker: joins complete at once, and session timeouts down to 1 s are allowed.
FAST_GROUPS: dict[str, object] = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
}
OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_MAX_MESSAGE_BYTES = 1024 * 1024  # Kafka's max.message.bytes for __consumer_offsets
BrokerFactory = Callable[..., BrokerProcess]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("groups") / "broker", config=FAST_GROUPS)
    process.start()
    yield process
    if process.process is not None:
        process.stop()


@pytest.fixture
def admin(shared: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": shared.bootstrap})


_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


def create_topic(admin: AdminClient, name: str, partitions: int) -> None:
    futures = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=TIMEOUT)
    futures[name].result(TIMEOUT)


def produce(bootstrap: str, topic: str, values: list[bytes], partitions: int) -> None:
    """Round-robin over the partitions, acknowledged before returning."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % partitions)
    assert producer.flush(TIMEOUT) == 0


def commit_start_offsets(admin: AdminClient, group: str, topic: str, partitions: int) -> None:
    """Offset 0 for every partition, committed while the group has no members. The consumers
    reset to *latest* without a committed offset, so a lost commit skips records."""
    offsets = [TopicPartition(topic, p, 0) for p in range(partitions)]
    request = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, offsets)])
    request[group].result(TIMEOUT)


def committed(admin: AdminClient, group: str) -> dict[int, int]:
    [result] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    return {tp.partition: tp.offset for tp in result.result(TIMEOUT).topic_partitions}


def describe(admin: AdminClient, group: str) -> ConsumerGroupDescription:
    return admin.describe_consumer_groups([group])[group].result(TIMEOUT)


def described_assignments(admin: AdminClient, group: str) -> dict[str, set[int]] | None:
    """client id -> partitions, when the group is Stable; None while it rebalances."""
    description = describe(admin, group)
    if description.state != ConsumerGroupState.STABLE:
        return None
    return {m.client_id: partitions_of(m) for m in description.members}


def partitions_of(member: MemberDescription) -> set[int]:
    return {tp.partition for tp in member.assignment.topic_partitions}


def listed_groups(admin: AdminClient) -> dict[str, ConsumerGroupState]:
    listing = admin.list_consumer_groups().result(TIMEOUT)
    assert not listing.errors
    return {g.group_id: g.state for g in listing.valid}


def stored_generation(bootstrap: str, group: str) -> int | None:
    """The generation in the group's newest metadata record in __consumer_offsets, read as
    Kafka's own tools would (key: version 2, group; value: version, protocol type,
    generation, ...)."""
    key = struct.pack(">hh", 2, len(group)) + group.encode()
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                       "enable.auto.commit": False})  # fmt: skip
    try:
        partitions = reader.list_topics(OFFSETS_TOPIC, TIMEOUT).topics[OFFSETS_TOPIC].partitions
        ends = {p: reader.get_watermark_offsets(TopicPartition(OFFSETS_TOPIC, p), TIMEOUT)[1]
                for p in partitions}  # fmt: skip
        reader.assign([TopicPartition(OFFSETS_TOPIC, p, OFFSET_BEGINNING)
                       for p, end in ends.items() if end])  # fmt: skip
        remaining = sum(ends.values())
        generation = None
        while remaining:
            batch = reader.consume(min(remaining, 500), TIMEOUT)
            assert batch, f"nothing read from {OFFSETS_TOPIC} within {TIMEOUT}s"
            for m in batch:
                assert m.error() is None, m.error()
                remaining -= 1
                if m.key() == key and m.value() is not None:
                    (type_length,) = struct.unpack_from(">h", m.value(), 2)
                    (generation,) = struct.unpack_from(">i", m.value(), 4 + type_length)
        return generation
    finally:
        reader.close()


class Member:
    """A confluent-kafka consumer in this process that records its rebalance callbacks; its
    callbacks (and fetches) run when `pump()` polls it."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str, **config: Any):
        self.name = name
        self.assigned: list[list[int]] = []
        self.revoked: list[list[int]] = []
        self.errors: list[KafkaError] = []
        self.values: list[bytes] = []
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "client.id": name, "session.timeout.ms": SESSION_MS,
                                  "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False, **config})  # fmt: skip
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_revoke)  # fmt: skip
        self.closed = False

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assigned.append(sorted(tp.partition for tp in partitions))

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.revoked.append(sorted(tp.partition for tp in partitions))

    def pump(self) -> None:
        message = self.consumer.poll(0.02)
        if message is None:
            return
        if message.error() is not None:
            self.errors.append(message.error())
        else:
            self.values.append(message.value())

    def owned(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.consumer.close()

    def __repr__(self) -> str:
        return (f"{self.name}: assigned={self.assigned} revoked={self.revoked} "
                f"errors={[str(e) for e in self.errors]}")  # fmt: skip


def pump_until(members: list[Member], condition: Callable[[], bool], timeout: float = TIMEOUT,
               explain: Callable[[], str] | None = None) -> None:  # fmt: skip
    """Poll every member until `condition` holds; fail at the deadline."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            detail = explain() if explain else ""
            raise AssertionError(f"not reached within {timeout}s: {members}\n{detail}")
        for member in members:
            member.pump()


def pump_for(members: list[Member], seconds: float) -> None:
    """Keep the members polling for a while: time for anything pending to show."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for member in members:
            member.pump()


def split_between(members: list[Member], admin: AdminClient, group: str, partitions: int) -> bool:
    """The group is Stable, each member owns what the coordinator says it does, every member
    owns something, and together they own each partition exactly once."""
    described = described_assignments(admin, group)
    owned = {m.name: m.owned() for m in members}
    every = sorted(p for ps in owned.values() for p in ps)
    return (described == owned and all(owned.values())
            and every == list(range(partitions)))  # fmt: skip


# ---- members join, leave and die -----------------------------------------------------------


class Scenario:
    """A group of child consumers on one topic, and the values produced to it."""

    def __init__(self, broker: BrokerProcess, admin: AdminClient, client: str, logs: Path):
        self.broker, self.admin, self.client, self.logs = broker, admin, client, logs
        self.topic = unique(f"members-{client}")
        self.group = unique(f"group-{client}")
        self.partitions = 6
        self.members: dict[str, ConsumerProcess] = {}
        self.produced: list[bytes] = []
        create_topic(admin, self.topic, self.partitions)
        commit_start_offsets(admin, self.group, self.topic, self.partitions)

    def join(self, name: str) -> ConsumerProcess:
        member = ConsumerProcess(self.client, self.broker.bootstrap, self.group, self.topic,
                                 name, self.logs, session_timeout_ms=SESSION_MS)  # fmt: skip
        self.members[name] = member
        return member

    def produce(self, count: int) -> None:
        values = [b"%s-%05d" % (self.topic.encode(), len(self.produced) + i) for i in range(count)]
        produce(self.broker.bootstrap, self.topic, values, self.partitions)
        self.produced += values

    def live(self) -> dict[str, ConsumerProcess]:
        return {name: m for name, m in self.members.items() if m.alive}

    def settled(self) -> bool:
        """Stable; each live member owns what the coordinator says, and those split the topic."""
        described = described_assignments(self.admin, self.group)
        live = self.live()
        if described is None or set(described) != set(live):
            return False
        owned = {name: set(m.snapshot()[0]) for name, m in live.items()}
        return owned == described and all(owned.values())

    def wait_settled(self) -> dict[str, set[int]]:
        poll(self.settled, TIMEOUT, "the group settled", interval=0.2, detail=self.explain)
        owned = {name: set(m.snapshot()[0]) for name, m in self.live().items()}
        every = [p for partitions in owned.values() for p in partitions]
        assert sorted(every) == list(range(self.partitions)), f"not a partition: {owned}"
        return owned

    def processed(self) -> set[bytes]:
        return {v for m in self.members.values() for v in m.snapshot()[1]}

    def explain(self) -> str:
        try:
            state = repr(described_assignments(self.admin, self.group))
        except Exception as exc:  # only for the failure message
            state = f"describe failed: {exc}"
        members = "\n".join(m.describe() for m in self.members.values())
        missing = len(set(self.produced) - self.processed())
        return f"described: {state}\nunprocessed: {missing}\n{members}"


@pytest.mark.parametrize("client", CLIENTS)
def test_members_share_the_partitions_through_joins_and_a_killed_member(
    shared: BrokerProcess, admin: AdminClient, client: str, tmp_path: Path
) -> None:
    scenario = Scenario(shared, admin, client, tmp_path)
    try:
        scenario.produce(60)
        for name in ("a", "b", "c"):
            scenario.join(name)
        first = scenario.wait_settled()
        assert sorted(len(p) for p in first.values()) == [2, 2, 2]

        scenario.produce(60)
        scenario.join("d")
        second = scenario.wait_settled()
        assert sorted(len(p) for p in second.values()) == [1, 1, 2, 2]

        victim = scenario.members["b"]
        orphaned = second["b"]
        victim.kill()
        killed = time.monotonic()
        scenario.produce(60)  # while the group still counts the dead member in
        third = scenario.wait_settled()
        # its last heartbeat was at most one interval (0.5 s) before the kill
        assert time.monotonic() - killed >= SESSION_MS / 1000 - 1, "removed before its session"
        assert set(third) == {"a", "c", "d"}
        assert orphaned <= set().union(*third.values()), "the dead member's partitions moved"

        scenario.produce(60)
        poll(lambda: scenario.processed() >= set(scenario.produced), TIMEOUT,
             "every produced value processed", detail=scenario.explain)  # fmt: skip
        assert scenario.processed() <= set(scenario.produced)
        ends = dict.fromkeys(range(6), len(scenario.produced) // scenario.partitions)

        def progress() -> str:
            return f"committed {committed(admin, scenario.group)}, ends {ends}"

        poll(lambda: committed(admin, scenario.group) == ends, TIMEOUT,
             "the group's offsets committed at the ends", detail=progress)  # fmt: skip
    finally:
        stop_all(scenario.members.values())


def test_the_initial_rebalance_delay_gathers_the_first_members_into_one_generation(
    broker_factory: BrokerFactory,
) -> None:
    """With Kafka's default group.initial.rebalance.delay.ms (3000), members that join an empty
    group together are assigned once, without the first one taking everything first."""
    broker = broker_factory()  # every group setting at its default
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    create_topic(admin, "delayed", 6)
    started = time.monotonic()
    members = [Member(broker.bootstrap, "delayed", "delayed", name, **{"session.timeout.ms": 6000})
               for name in ("a", "b", "c")]  # fmt: skip
    try:
        pump_until(members, lambda: all(m.assigned for m in members))
        waited = time.monotonic() - started
        pump_until(members, lambda: split_between(members, admin, "delayed", 6))
        assert waited >= 2.9, "the join completed before the initial rebalance delay"
        for member in members:
            assert len(member.assigned) == 1, member
            assert len(member.assigned[0]) == 2, member
            assert member.revoked == [], member
    finally:
        for member in members:
            member.close()


# ---- cooperative rebalancing ---------------------------------------------------------------


def test_cooperative_sticky_members_keep_their_partitions_when_another_joins(
    shared: BrokerProcess, admin: AdminClient
) -> None:
    topic, group = unique("cooperative"), unique("cooperative")
    create_topic(admin, topic, 6)
    cooperative = {"partition.assignment.strategy": "cooperative-sticky"}
    a = Member(shared.bootstrap, group, topic, "a", **cooperative)
    b = Member(shared.bootstrap, group, topic, "b", **cooperative)
    members = [a, b]
    try:
        pump_until(members, lambda: split_between(members, admin, group, 6))
        before = {m.name: m.owned() for m in members}
        history = {m.name: (len(m.assigned), len(m.revoked)) for m in members}
        for member in members:  # incremental all along: what was added minus what was taken
            added = {p for ps in member.assigned for p in ps}
            taken = {p for ps in member.revoked for p in ps}
            assert added - taken == member.owned(), member

        c = Member(shared.bootstrap, group, topic, "c", **cooperative)
        members.append(c)
        pump_until(members, lambda: split_between(members, admin, group, 6))

        for member in (a, b):
            assigns, revokes = history[member.name]
            newly_revoked = member.revoked[revokes:]
            newly_assigned = member.assigned[assigns:]
            assert newly_revoked, f"{member.name} gave nothing up to the newcomer"
            for partitions in newly_revoked:
                assert set(partitions) < before[member.name], f"not incremental: {member}"
            assert all(partitions == [] for partitions in newly_assigned), member
            kept = before[member.name] - {p for ps in newly_revoked for p in ps}
            assert member.owned() == kept, member
        assert c.revoked == []
        assert {p for ps in c.assigned for p in ps} == c.owned()
        assert [len(m.owned()) for m in members] == [2, 2, 2]
    finally:
        for member in members:
            member.close()


# ---- static membership ---------------------------------------------------------------------


def test_restarted_static_members_take_their_places_back_without_a_rebalance(
    shared: BrokerProcess, admin: AdminClient
) -> None:
    """Each member in turn (so the leader too) is closed and replaced by a new consumer with
    its group.instance.id: the replacement gets the same partitions at once, and nobody's
    callbacks fire, which they would on any rebalance (eager protocol: revoke all, assign)."""
    topic, group = unique("static"), unique("static")
    create_topic(admin, topic, 6)

    def static(name: str, instance: str) -> Member:
        config = {"group.instance.id": instance, "session.timeout.ms": 6000}
        return Member(shared.bootstrap, group, topic, name, **config)

    def by_instance() -> dict[str, tuple[str, set[int]]]:
        """instance id -> (member id, partitions), from DescribeGroups"""
        description = describe(admin, group)
        assert description.state == ConsumerGroupState.STABLE
        return {m.group_instance_id: (m.member_id, partitions_of(m)) for m in description.members}

    members = {name: static(name, f"instance-{name}") for name in "abc"}
    try:
        pump_until(
            list(members.values()), lambda: split_between(list(members.values()), admin, group, 6)
        )
        before = by_instance()
        generation = stored_generation(shared.bootstrap, group)
        assert generation is not None
        settled = {m.name: (list(m.assigned), list(m.revoked)) for m in members.values()}
        for name in "abc":
            old = members[name]
            assert (old.assigned, old.revoked) == settled[name], f"a rebalance reached {old}"
            owned = old.owned()
            old.close()  # a static member's close() sends no LeaveGroup
            replacement = members[name] = static(f"{name}2", f"instance-{name}")
            pump_until(list(members.values()), lambda r=replacement, o=owned: r.owned() == o)
        pump_for(list(members.values()), 2.0)  # four heartbeats: time for a rebalance to show

        for member in members.values():
            assert len(member.assigned) == 1 and member.revoked == [], member
        after = by_instance()
        assert {i: p for i, (_, p) in after.items()} == {i: p for i, (_, p) in before.items()}
        assert all(after[i][0] != before[i][0] for i in after), "each rejoined as a new member id"
        assert stored_generation(shared.bootstrap, group) == generation
    finally:
        for member in members.values():
            member.close()


def test_a_second_consumer_with_a_used_instance_id_fences_the_first(
    shared: BrokerProcess, admin: AdminClient
) -> None:
    """librdkafka treats FENCED_INSTANCE_ID as fatal: the old consumer stops with an error and
    the new one keeps the partitions."""
    topic, group = unique("fenced"), unique("fenced")
    create_topic(admin, topic, 4)

    def static(name: str, instance: str) -> Member:
        return Member(shared.bootstrap, group, topic, name, **{"group.instance.id": instance})

    old, other = static("old", "instance-a"), static("other", "instance-b")
    members = [old, other]
    try:
        pump_until(members, lambda: split_between(members, admin, group, 4))
        new = static("new", "instance-a")
        members.append(new)
        pump_until(members, lambda: any(e.code() == KafkaError._FATAL for e in old.errors))
        fatal = next(e for e in old.errors if e.code() == KafkaError._FATAL)
        assert "fenced by other consumer with same group.instance.id" in fatal.str(), fatal
        live = [new, other]
        pump_until(live, lambda: split_between(live, admin, group, 4))
    finally:
        for member in members:
            member.close()


def test_the_fenced_member_hears_fenced_instance_id(shared: BrokerProcess) -> None:
    """The same at the wire: once a second JoinGroup took the instance id over, the old member
    id's Heartbeat, OffsetCommit and SyncGroup get FENCED_INSTANCE_ID (82), as from Kafka."""
    group = unique("fenced-raw")
    subscription = [("range", consumer_subscription(["fenced-raw-topic"]))]
    first, second = RawMember(shared, group), RawMember(shared, group)
    try:
        joined = first.join(subscription, session_timeout_ms=6000, rebalance_timeout_ms=6000,
                            instance_id="instance")  # fmt: skip
        assert joined.error_code is ErrorCode.none
        assert first.sync({first.member_id: b""}).error_code is ErrorCode.none
        replaced = second.join(subscription, session_timeout_ms=6000, rebalance_timeout_ms=6000,
                               instance_id="instance")  # fmt: skip
        assert replaced.error_code is ErrorCode.none
        assert replaced.member_id != first.member_id
        assert second.heartbeat() is ErrorCode.none
        assert first.heartbeat() is ErrorCode.fenced_instance_id
        assert first.commit({("fenced-raw-topic", 0): 1}) == {
            ("fenced-raw-topic", 0): ErrorCode.fenced_instance_id
        }
        assert first.sync({}).error_code is ErrorCode.fenced_instance_id
    finally:
        first.close()
        second.close()


# ---- committed offsets and group state through kill -9 -------------------------------------


def fresh_admin(broker: BrokerProcess) -> AdminClient:
    """An AdminClient that has not seen the broker go down. librdkafka 2.16 re-bootstraps when
    every broker is unreachable and drops its broker handle, but its admin coordinator cache
    keeps the dropped one: DescribeConsumerGroups on an older client then never completes."""
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def values_for(tag: str, start: int, count: int) -> list[bytes]:
    return [b"%s-%05d" % (tag.encode(), i) for i in range(start, start + count)]


@pytest.mark.parametrize("client", CLIENTS)
def test_offsets_and_the_group_survive_kill_9(
    broker_factory: BrokerFactory, client: str, tmp_path: Path
) -> None:
    broker = broker_factory(**FAST_GROUPS)
    admin = fresh_admin(broker)
    topic, group = f"durable-{client}", f"durable-{client}"
    create_topic(admin, topic, 6)
    commit_start_offsets(admin, group, topic, 6)
    first_values = values_for(topic, 0, 60)
    produce(broker.bootstrap, topic, first_values, 6)
    consumers: list[ConsumerProcess] = []

    def start(name: str) -> ConsumerProcess:
        consumer = ConsumerProcess(client, broker.bootstrap, group, topic, name, tmp_path,
                                   session_timeout_ms=10_000)  # fmt: skip
        consumers.append(consumer)
        return consumer

    def processed_all(consumer: ConsumerProcess, values: list[bytes]) -> None:
        poll(lambda: set(consumer.snapshot()[1]) >= set(values), TIMEOUT,
             f"{len(values)} values processed", detail=consumer.describe)  # fmt: skip

    try:
        first = start("first")
        processed_all(first, first_values)
        poll(lambda: committed(admin, group) == dict.fromkeys(range(6), 10), TIMEOUT,
             "offset 10 committed on every partition", detail=first.describe)  # fmt: skip
        [member] = describe(admin, group).members

        broker.kill()
        broker.start()
        admin = fresh_admin(broker)
        assert listed_groups(admin)[group] == ConsumerGroupState.STABLE
        restored = describe(admin, group)
        assert [(m.member_id, m.client_id) for m in restored.members] == [
            (member.member_id, "first")
        ]
        assert restored.members[0].assignment.topic_partitions == member.assignment.topic_partitions
        assert committed(admin, group) == dict.fromkeys(range(6), 10)
        second_values = values_for(topic, 60, 60)
        produce(broker.bootstrap, topic, second_values, 6)
        processed_all(first, second_values)
        assert [m.member_id for m in describe(admin, group).members] == [member.member_id], (
            "the member carried on in the restored generation"
        )
        assert first.stop() == 0
        poll(lambda: describe(admin, group).state == ConsumerGroupState.EMPTY, TIMEOUT,
             "the group empty", detail=lambda: str(describe(admin, group).state))  # fmt: skip

        broker.kill()
        broker.start()
        admin = fresh_admin(broker)
        assert listed_groups(admin)[group] == ConsumerGroupState.EMPTY
        assert committed(admin, group) == dict.fromkeys(range(6), 20)
        third_values = values_for(topic, 120, 60)
        produce(broker.bootstrap, topic, third_values, 6)
        second = start("second")
        processed_all(second, third_values)
        again = set(second.snapshot()[1]) & set(first_values + second_values)
        assert not again, f"{len(again)} committed records consumed again"
    finally:
        stop_all(consumers)


# ---- bad input -----------------------------------------------------------------------------


def test_committing_offsets_of_an_unknown_topic_or_partition_is_refused(
    shared: BrokerProcess, admin: AdminClient
) -> None:
    topic, group = unique("commit-unknown"), unique("commit-unknown")
    create_topic(admin, topic, 2)
    raw = RawMember(shared, group)  # a simple consumer: no generation, no member id
    try:
        answers = raw.commit({("no-such-topic", 0): 5, (topic, 2): 5, (topic, 1): 7})
    finally:
        raw.close()
    assert answers == {
        ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
        (topic, 2): ErrorCode.unknown_topic_or_partition,
        (topic, 1): ErrorCode.none,
    }

    consumer = Consumer({"bootstrap.servers": shared.bootstrap, "group.id": group})
    try:
        with pytest.raises(KafkaException) as raised:
            consumer.commit(offsets=[TopicPartition("no-such-topic", 0, 9),
                                     TopicPartition(topic, 0, 3)], asynchronous=False)  # fmt: skip
        assert raised.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        stored = consumer.committed(
            [TopicPartition(t, p) for t, p in [(topic, 0), (topic, 1), (topic, 2),
                                               ("no-such-topic", 0)]], TIMEOUT)  # fmt: skip
    finally:
        consumer.close()
    assert [tp.offset for tp in stored] == [3, 7, -1001, -1001], "only the known ones stored"


def test_garbage_subscription_metadata_does_not_break_the_group(
    shared: BrokerProcess, admin: AdminClient
) -> None:
    """Kafka does not read consumer subscriptions; the leader does. librdkafka, leading, skips
    the member it cannot parse, and the group carries on once that member leaves."""
    topic, group = unique("garbage"), unique("garbage")
    create_topic(admin, topic, 3)
    member = Member(shared.bootstrap, group, topic, "good")
    raw = RawMember(shared, group)
    try:
        pump_until([member], lambda: split_between([member], admin, group, 3))
        joined: dict[str, Any] = {}
        garbage = [("range", b"\xff\x07" + bytes(range(40))), ("roundrobin", b"")]
        joining = threading.Thread(target=lambda: joined.update(answer=raw.join(
            garbage, session_timeout_ms=3000, rebalance_timeout_ms=3000)))  # fmt: skip
        joining.start()
        pump_until([member], lambda: not joining.is_alive())
        answer = joined["answer"]
        assert answer.error_code is ErrorCode.none
        assert answer.leader != raw.member_id
        synced: dict[str, Any] = {}
        syncing = threading.Thread(target=lambda: synced.update(answer=raw.sync({})))
        syncing.start()
        pump_until([member], lambda: not syncing.is_alive())
        assert synced["answer"].error_code is ErrorCode.none
        assert member.owned() == {0, 1, 2}, "the leader kept what it could not give away"
        assert raw.leave().error_code is ErrorCode.none

        produce(shared.bootstrap, topic, [b"after the garbage"], 3)
        pump_until([member], lambda: b"after the garbage" in member.values)
        pump_until([member], lambda: split_between([member], admin, group, 3))
    finally:
        raw.close()
        member.close()


def test_offset_delete_survives_a_member_with_a_huge_topic_count(
    broker_factory: BrokerFactory,
) -> None:
    """A subscription claiming 2**31-1 topics in 6 bytes. OffsetDelete reads subscriptions
    (to refuse subscribed topics) and must answer, not loop over the claimed count."""
    broker = broker_factory(**FAST_GROUPS)
    member, admin_conn = RawMember(broker, "huge"), RawMember(broker, "huge", timeout=5)
    answered = False
    try:
        huge = struct.pack(">hi", 0, 2**31 - 1)
        assert member.join([("range", huge)], session_timeout_ms=6000,
                           rebalance_timeout_ms=6000).error_code is ErrorCode.none  # fmt: skip
        assert member.sync({member.member_id: b""}).error_code is ErrorCode.none
        try:
            error, partitions = admin_conn.delete_offsets([("some-topic", 0)])
        except TimeoutError:
            pytest.fail("no answer to OffsetDelete within 5 s: the broker is stuck")
        answered = True
        assert error is ErrorCode.none
        assert partitions == {("some-topic", 0): ErrorCode.none}
    finally:
        member.close()
        admin_conn.close()
        if not answered and broker.process is not None:
            broker.kill()  # it spins on one core, ignoring SIGTERM


def test_an_assignment_too_big_for_the_offsets_topic_fails_the_sync_only(
    shared: BrokerProcess, admin: AdminClient
) -> None:
    """The group's record must fit __consumer_offsets' max.message.bytes (1 MiB). Kafka answers
    a bigger one with UNKNOWN_SERVER_ERROR and rebalances; the group then works as usual."""
    topic, group = unique("oversized"), unique("oversized")
    create_topic(admin, topic, 3)
    subscription = [("range", consumer_subscription([topic]))]
    leader = RawMember(shared, group)
    try:
        joined = leader.join(subscription, session_timeout_ms=2000, rebalance_timeout_ms=2000)
        assert joined.error_code is ErrorCode.none
        too_big = consumer_assignment({topic: [0, 1, 2]}, b"x" * OFFSETS_MAX_MESSAGE_BYTES)
        answer = leader.sync({leader.member_id: too_big})
        assert answer.error_code is ErrorCode.unknown_server_error
        assert leader.heartbeat() is ErrorCode.rebalance_in_progress
        assert describe(admin, group).state == ConsumerGroupState.PREPARING_REBALANCING

        rejoined = leader.join(subscription, session_timeout_ms=2000, rebalance_timeout_ms=2000)
        assert rejoined.generation_id > joined.generation_id
        fits = consumer_assignment({topic: [0, 1, 2]}, b"y" * (OFFSETS_MAX_MESSAGE_BYTES // 2))
        assert leader.sync({leader.member_id: fits}).assignment == fits
    finally:
        leader.close()  # no LeaveGroup: the group finds out by the session timeout

    member = Member(shared.bootstrap, group, topic, "normal")
    try:
        produce(shared.bootstrap, topic, [b"after the oversized sync"], 3)
        pump_until([member], lambda: split_between([member], admin, group, 3))
        pump_until([member], lambda: b"after the oversized sync" in member.values)
    finally:
        member.close()


# ---- the admin API -------------------------------------------------------------------------


@pytest.fixture
def live_group(shared: BrokerProcess, admin: AdminClient) -> Iterator[tuple[str, str]]:
    """(group, topic): two stable confluent members splitting a 4-partition topic, and
    committed offsets for another topic nobody subscribes to."""
    topic, group = unique("admin"), unique("admin")
    create_topic(admin, topic, 4)
    create_topic(admin, f"{topic}-old", 1)
    offsets = [TopicPartition(f"{topic}-old", 0, 1)]
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, offsets)])[
        group
    ].result(TIMEOUT)
    members = [Member(shared.bootstrap, group, topic, name) for name in ("one", "two")]
    try:
        pump_until(members, lambda: split_between(members, admin, group, 4))
        yield group, topic  # librdkafka heartbeats on its own threads meanwhile
    finally:
        for member in members:
            member.close()


def test_confluent_admin_lists_describes_and_deletes_groups(
    shared: BrokerProcess, admin: AdminClient, live_group: tuple[str, str]
) -> None:
    group, topic = live_group
    assert listed_groups(admin)[group] == ConsumerGroupState.STABLE
    description = describe(admin, group)
    assert description.state == ConsumerGroupState.STABLE
    assert description.partition_assignor == "range"
    assert not description.is_simple_consumer_group
    assignment = {m.client_id: [(tp.topic, tp.partition) for tp in m.assignment.topic_partitions]
                  for m in description.members}  # fmt: skip
    assert assignment == {"one": [(topic, 0), (topic, 1)], "two": [(topic, 2), (topic, 3)]}

    with pytest.raises(KafkaException) as raised:
        admin.delete_consumer_groups([group])[group].result(TIMEOUT)
    assert raised.value.args[0].code() == KafkaError.NON_EMPTY_GROUP == 68
    assert group in listed_groups(admin)

    empty = unique("admin-empty")
    offsets = [TopicPartition(topic, 0, 2)]
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(empty, offsets)])[
        empty
    ].result(TIMEOUT)
    assert listed_groups(admin)[empty] == ConsumerGroupState.EMPTY
    assert committed(admin, empty) == {0: 2}
    admin.delete_consumer_groups([empty])[empty].result(TIMEOUT)
    assert empty not in listed_groups(admin)
    assert committed(admin, empty) == {}, "the group's offsets went with it"
    with pytest.raises(KafkaException) as raised:
        admin.delete_consumer_groups([empty])[empty].result(TIMEOUT)
    assert raised.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND


@pytest.fixture
def python_admin(shared: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=shared.bootstrap, request_timeout_ms=TIMEOUT * 1000)
    yield client
    client.close()


def test_kafka_python_admin_lists_describes_and_deletes_groups(
    shared: BrokerProcess, admin: AdminClient, python_admin: KafkaAdminClient,
    live_group: tuple[str, str],
) -> None:  # fmt: skip
    group, topic = live_group
    listed = {g["group_id"]: g for g in python_admin.list_groups()}
    assert listed[group]["protocol_type"] == "consumer"
    described = python_admin.describe_groups([group])[group]
    assert described["group_state"] == "Stable"
    assert described["protocol_type"] == "consumer"
    assert described["protocol_data"] == "range"
    members = {m["client_id"]: m for m in described["members"]}
    assert sorted(members) == ["one", "two"]
    for m in members.values():
        assert m["member_metadata"]["topics"] == [topic]
    assignment = {cid: m["member_assignment"]["assigned_partitions"] for cid, m in members.items()}
    assert assignment == {
        "one": [{"topic": topic, "partitions": [0, 1]}],
        "two": [{"topic": topic, "partitions": [2, 3]}],
    }

    assert python_admin.delete_groups([group]) == {group: "NonEmptyGroupError"}
    assert group in {g["group_id"] for g in python_admin.list_groups()}

    subscribed = kafka.TopicPartition(topic, 0)
    unsubscribed = kafka.TopicPartition(f"{topic}-old", 0)
    results = python_admin.delete_group_offsets(group, [subscribed, unsubscribed])
    assert results == {
        subscribed: kafka.errors.GroupSubscribedToTopicError,
        unsubscribed: kafka.errors.NoError,
    }
    assert kafka.errors.GroupSubscribedToTopicError.errno == 86
    assert committed(admin, group) == {}, "the unsubscribed topic's offset is gone"

    empty = unique("admin-empty")
    offsets = [TopicPartition(topic, 0, 2)]
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(empty, offsets)])[
        empty
    ].result(TIMEOUT)
    assert python_admin.list_group_offsets({empty: None})[empty] == {
        subscribed: kafka.OffsetAndMetadata(2, "", -1)
    }
    assert python_admin.delete_groups([empty]) == {empty: "OK"}
    assert empty not in {g["group_id"] for g in python_admin.list_groups()}
    assert python_admin.delete_groups([empty]) == {empty: "GroupIdNotFoundError"}
