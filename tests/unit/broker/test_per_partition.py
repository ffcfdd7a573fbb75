"""The per-partition answers handlers build: grouped under their topic in the order given, with
each API's own field names."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from weir.broker.handlers.per_partition import by_topic, flat_partition_errors, partition_errors
from weir.protocol.apis import ApiKey, InterBrokerApiKey
from weir.protocol.codec import response_module

RESULTS = {
    ("orders", 2): ErrorCode.none,
    ("payments", 0): ErrorCode.unknown_topic_or_partition,
    ("orders", 0): ErrorCode.not_coordinator,
}


def test_errors_are_grouped_by_topic_in_the_order_given() -> None:
    m = response_module(ApiKey.OFFSET_COMMIT, 8)
    topics = partition_errors(RESULTS, m.OffsetCommitResponsePartition, m.OffsetCommitResponseTopic)
    answered = [(t.name, [(p.partition_index, p.error_code) for p in t.partitions])
                for t in topics]  # fmt: skip
    assert answered == [
        ("orders", [(2, ErrorCode.none), (0, ErrorCode.not_coordinator)]),
        ("payments", [(0, ErrorCode.unknown_topic_or_partition)]),
    ]


def test_an_apis_own_field_names_and_shared_fields() -> None:
    m = response_module(ApiKey.ELECT_LEADERS, 2)
    (topic, _) = partition_errors(RESULTS, m.PartitionResult, m.ReplicaElectionResult,
                                  index="partition_id", name="topic",
                                  partitions="partition_result", error_message=None)  # fmt: skip
    assert topic.topic == "orders"
    assert [(p.partition_id, p.error_message) for p in topic.partition_result] == [
        (2, None),
        (0, None),
    ]


def test_by_topic_builds_entries_with_the_callers_builders() -> None:
    built = by_topic([(("t", 1), "a"), (("u", 0), "b"), (("t", 0), "c")],
                     lambda index, value: f"{index}{value}",
                     lambda name, entries: (name, entries))  # fmt: skip
    assert built == (("t", ("1a", "0c")), ("u", ("0b",)))


def test_flat_errors_name_their_topic_on_each_entry() -> None:
    m = response_module(InterBrokerApiKey.STOP_REPLICA, 3)
    entries = flat_partition_errors(RESULTS, m.StopReplicaPartitionError)
    assert [(e.topic_name, e.partition_index, e.error_code) for e in entries] == [
        (topic, index, code) for (topic, index), code in RESULTS.items()
    ]
