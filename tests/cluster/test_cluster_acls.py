"""ACLs in cluster mode: kept in ZooKeeper in Kafka's layout and shared by every broker.

An ACL created through broker 1 is listed by DescribeAcls on broker 2 and refuses broker 2's
next request; one deleted through broker 1 stops a consumer reading from broker 2; the znodes
are Kafka's (`/kafka-acl/Topic/orders`, `/kafka-acl-extended/prefixed/...`, the two change
queues). The brokers' own requests (a follower's Fetch, a leader's AddPartitionsToTxn v4) need
ClusterAction. Two stores changing one resource at once both keep their changes.

Cluster mode serves one PLAINTEXT listener on this branch, so every client and every broker is
User:ANONYMOUS: the brokers run with `allow.everyone.if.no.acl.found = true` (the cluster
resource has no ACL, so their ClusterAction passes) and the ACLs name User:ANONYMOUS and
User:alice.
"""

from __future__ import annotations

import datetime
import json
import threading
import time
from typing import Any

from cluster_brokers import (
    CHROOT,
    exchange,
    poll,
    timed_poll,
    wait_same_everywhere,
    wait_settled,
)
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.create_acls.v3 import request as create_request
from kio.schema.delete_acls.v3 import request as delete_request
from kio.schema.describe_acls.v3 import request as describe_request
from kio.schema.errors import ErrorCode

from weir.broker.authz.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclError,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from weir.broker.authz.authorizer import Authorizer
from weir.broker.authz.decision import Policy
from weir.broker.authz.store import ZooKeeperAclStore
from weir.cluster.acl_znodes import AclEntry, AclResource
from weir.cluster.zookeeper_acls import ZooKeeperAcls
from weir.protocol.apis import ApiKey
from weir.protocol.codec import request_module

CREATE_ACLS, DESCRIBE_ACLS, DELETE_ACLS = 30, 29, 31
CONFIG = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "allow.everyone.if.no.acl.found": True,
}
ANONYMOUS = "User:ANONYMOUS"
TOPIC, LITERAL, PREFIXED = ResourceType.TOPIC, PatternType.LITERAL, PatternType.PREFIXED
ALLOW = AclPermissionType.ALLOW


def creation(name: str, pattern: PatternType, principal: str, operation: AclOperation) -> Any:
    return create_request.AclCreation(
        resource_type=TOPIC, resource_name=name, resource_pattern_type=pattern,
        principal=principal, host="*", operation=operation, permission_type=ALLOW,
    )  # fmt: skip


def described(address: tuple[str, int]) -> set[tuple[str, int, str, int]]:
    """(resource name, pattern type, principal, operation) of every topic ACL a broker lists."""
    response = exchange(address, DESCRIBE_ACLS, 3, describe_request.DescribeAclsRequest(
        resource_type_filter=TOPIC, resource_name_filter=None, pattern_type_filter=PatternType.ANY,
        principal_filter=None, host_filter=None, operation=AclOperation.ANY,
        permission_type=AclPermissionType.ANY,
    ))  # fmt: skip
    assert response.error_code == 0, response
    return {
        (r.resource_name, r.pattern_type, a.principal, a.operation)
        for r in response.resources
        for a in r.acls
    }


def test_acls_are_shared_by_the_brokers_through_zookeeper(
    zookeeper, cluster_brokers, zk_view, figure
):
    brokers = cluster_brokers.start_cluster(f"{zookeeper.connect}{CHROOT}", 2, config=CONFIG)
    wait_settled(brokers.values())
    one, two = brokers[1], brokers[2]
    admin = AdminClient({"bootstrap.servers": one.bootstrap})
    admin.create_topics([NewTopic("orders", 1, replica_assignment=[[2]])])["orders"].result(30)
    wait_same_everywhere(brokers.values(), "orders", 1)
    producer = Producer({"bootstrap.servers": one.bootstrap, "message.timeout.ms": 10_000})
    assert deliver(producer, b"before") is None

    # through broker 1: ANONYMOUS may Read orders; alice may Write every topic starting "ord"
    response = exchange(one.address, CREATE_ACLS, 3, create_request.CreateAclsRequest(creations=(
        creation("orders", LITERAL, ANONYMOUS, AclOperation.READ),
        creation("ord", PREFIXED, "User:alice", AclOperation.WRITE),
    )))  # fmt: skip
    assert [r.error_code for r in response.results] == [0, 0]
    expected = {("orders", LITERAL, ANONYMOUS, AclOperation.READ),
                ("ord", PREFIXED, "User:alice", AclOperation.WRITE)}  # fmt: skip
    _, seconds = timed_poll(lambda: described(two.address) == expected, 10, "the ACLs on broker 2")
    figure("CreateAcls on broker 1 -> listed by broker 2", seconds)

    # broker 2 (the leader of orders) decides on them at once: Write refused, Read allowed
    refused = deliver(producer, b"after")
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    consumer = Consumer({"bootstrap.servers": one.bootstrap, "group.id": "readers",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})  # fmt: skip
    try:
        consumer.assign([TopicPartition("orders", 0, 0)])
        first = poll(lambda: consumer.poll(0.5), 15, "the message before the ACLs")
        assert first.error() is None and first.value() == b"before"

        assert_kafka_layout(zk_view)

        # through broker 1 again: ANONYMOUS's Read is deleted; the consumer reading from
        # broker 2 is refused on one of its next fetches (alice's prefixed ACL still applies)
        deleted = exchange(one.address, DELETE_ACLS, 3, delete_request.DeleteAclsRequest(
            filters=(delete_request.DeleteAclsFilter(
                resource_type_filter=TOPIC, resource_name_filter="orders",
                pattern_type_filter=LITERAL, principal_filter=ANONYMOUS, host_filter=None,
                operation=AclOperation.ANY, permission_type=AclPermissionType.ANY,
            ),)
        ))  # fmt: skip
        [result] = deleted.filter_results
        assert result.error_code == 0 and len(result.matching_acls) == 1
        removed_at = time.monotonic()
        error = poll(lambda: refusal(consumer), 15, "the consumer refused after the deletion")
        assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
        figure(
            "DeleteAcls on broker 1 -> consumer refused by broker 2", time.monotonic() - removed_at
        )
    finally:
        consumer.close()
    assert not zk_view.exists("/kafka-acl/Topic/orders")  # its last ACL is gone
    assert described(two.address) == {("ord", PREFIXED, "User:alice", AclOperation.WRITE)}
    assert_brokers_need_cluster_action(one.address, two.address)


def assert_brokers_need_cluster_action(one: tuple[str, int], two: tuple[str, int]) -> None:
    """A follower's Fetch and a leader's AddPartitionsToTxn v4 need ClusterAction on the
    cluster: allowed while the cluster has no ACL, refused by broker 1 once broker 2 stores a
    deny for the brokers' principal."""
    assert follower_fetch_error(one) == ErrorCode.unknown_topic_or_partition  # not a replica
    assert verify_error(one) == ErrorCode.none
    response = exchange(two, CREATE_ACLS, 3, create_request.CreateAclsRequest(creations=(
        create_request.AclCreation(
            resource_type=ResourceType.CLUSTER, resource_name="kafka-cluster",
            resource_pattern_type=LITERAL, principal=ANONYMOUS, host="*",
            operation=AclOperation.CLUSTER_ACTION, permission_type=AclPermissionType.DENY,
        ),
    )))  # fmt: skip
    assert [r.error_code for r in response.results] == [0]
    poll(lambda: verify_error(one) == ErrorCode.cluster_authorization_failed, 10,
         "AddPartitionsToTxn v4 refused by broker 1")  # fmt: skip
    assert follower_fetch_error(one) == ErrorCode.topic_authorization_failed


def follower_fetch_error(address: tuple[str, int]) -> ErrorCode:
    m = request_module(ApiKey.FETCH, 12)
    partition = m.FetchPartition(
        partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
        log_start_offset=0, partition_max_bytes=1 << 20,
    )  # fmt: skip
    response = exchange(address, ApiKey.FETCH, 12, m.FetchRequest(
        cluster_id=None, replica_id=2, max_wait=datetime.timedelta(0), min_bytes=1,
        max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
        topics=(m.FetchTopic(topic="orders", partitions=(partition,)),),
        forgotten_topics_data=(), rack_id="",
    ))  # fmt: skip
    [topic] = response.responses
    [data] = topic.partitions
    return ErrorCode(data.error_code)


def verify_error(address: tuple[str, int]) -> ErrorCode:
    """The top-level error of a partition leader's AddPartitionsToTxn v4 (verify_only)."""
    m = request_module(ApiKey.ADD_PARTITIONS_TO_TXN, 4)
    response = exchange(address, ApiKey.ADD_PARTITIONS_TO_TXN, 4, m.AddPartitionsToTxnRequest(
        transactions=(m.AddPartitionsToTxnTransaction(
            transactional_id="txn", producer_id=1, producer_epoch=0, verify_only=True,
            topics=(m.AddPartitionsToTxnTopic(name="orders", partitions=(0,)),),
        ),),
    ))  # fmt: skip
    return ErrorCode(response.error_code)


def assert_kafka_layout(zk_view: Any) -> None:
    assert zk_view.json("/kafka-acl/Topic/orders") == {"version": 1, "acls": [
        {"principal": ANONYMOUS, "permissionType": "Allow", "operation": "Read", "host": "*"},
    ]}  # fmt: skip
    assert zk_view.json("/kafka-acl-extended/prefixed/Topic/ord") == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Write", "host": "*"},
    ]}  # fmt: skip
    [literal] = zk_view.children("/kafka-acl-changes")
    assert literal.startswith("acl_changes_")
    assert zk_view.get(f"/kafka-acl-changes/{literal}") == b"TOPIC:orders"
    [extended] = zk_view.children("/kafka-acl-extended-changes")
    assert json.loads(zk_view.get(f"/kafka-acl-extended-changes/{extended}") or b"") == {
        "version": 1, "resourceType": "TOPIC", "name": "ord", "patternType": "PREFIXED",
    }  # fmt: skip


def deliver(producer: Producer, value: bytes) -> KafkaError | None:
    """Produce one message to orders; its delivery error (None when delivered)."""
    outcome: list[KafkaError | None] = []
    producer.produce("orders", value, on_delivery=lambda error, _: outcome.append(error))
    producer.flush(15)
    assert outcome, "no delivery report"
    return outcome[0]


def refusal(consumer: Consumer) -> KafkaError | None:
    message = consumer.poll(0.5)
    return message.error() if message is not None and message.error() else None


def test_two_brokers_changing_one_resource_keep_both_changes(zookeeper):
    """Conditional writes: each store adds its own entries to one resource from its own thread;
    every entry is kept, and each store hears of the other's changes."""
    connect = f"{zookeeper.connect}{CHROOT}"
    stores = [ZooKeeperAcls(connect), ZooKeeperAcls(connect)]
    heard: list[list[AclResource]] = [[], []]
    resource = AclResource("Group", "shared", "LITERAL")
    for store, notes in zip(stores, heard, strict=True):
        store.start(30)
        store.watch_changes(notes.append)

    def add(store: ZooKeeperAcls, who: str) -> None:
        for n in range(15):
            entry = AclEntry(f"User:{who}-{n}", "Allow", "Read", "*")
            store.update(resource, lambda stored, entry=entry: stored | {entry})

    try:
        threads = [
            threading.Thread(target=add, args=(s, w)) for s, w in zip(stores, "ab", strict=True)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        stored = stores[0].read(resource)
        assert len(stored) == 30
        assert stores[1].load() == {resource: stored}
        poll(lambda: len(heard[0]) == len(heard[1]) == 30, 10, "30 notifications each")
        assert set(heard[0]) == {resource}
    finally:
        for store in stores:
            store.close()


def test_authorizers_on_one_zookeeper_follow_each_others_changes(zookeeper, zk_view):
    """Two authorizers (as two brokers hold them) on one ZooKeeper: a change through either
    decides the other's next authorization; an entry another tool wrote that this version
    cannot read is kept through changes; a name ZooKeeper cannot hold is refused."""
    connect = f"{zookeeper.connect}{CHROOT}"
    zk_view.client.ensure_path(f"{CHROOT}/kafka-acl/Group")
    zk_view.client.create(f"{CHROOT}/kafka-acl/Group/etl", json.dumps({"version": 1, "acls": [
        {"principal": "User:bob", "permissionType": "Allow", "operation": "Fly", "host": "*"},
    ]}).encode())  # fmt: skip
    authorizers = []
    for _ in range(2):
        acls = ZooKeeperAcls(connect)
        acls.start(30)
        authorizers.append(Authorizer(Policy(), ZooKeeperAclStore(acls)))
    first, second = authorizers
    alice_reads = AccessControlEntry("User:alice", "*", AclOperation.READ, ALLOW)
    read_etl = AclBinding(ResourcePattern(ResourceType.GROUP, "etl", LITERAL), alice_reads)
    try:
        assert not second.authorize("User:alice", "h", AclOperation.READ, ResourceType.GROUP, "etl")
        assert first.create([read_etl]) == [None]
        poll(lambda: second.authorize("User:alice", "h", AclOperation.READ, ResourceType.GROUP,
                                      "etl"), 10, "alice may read etl on the second")  # fmt: skip
        stored = zk_view.json("/kafka-acl/Group/etl")["acls"]
        assert {a["operation"] for a in stored} == {"Fly", "Read"}

        assert second.delete([AclBindingFilter(principal="User:alice")]) == [[read_etl]]
        poll(lambda: not first.bindings, 10, "the deletion seen by the first")
        assert [a["operation"] for a in zk_view.json("/kafka-acl/Group/etl")["acls"]] == ["Fly"]

        slash = AclBinding(ResourcePattern(ResourceType.GROUP, "a/b", LITERAL), read_etl.entry)
        [refused] = first.create([slash])
        assert isinstance(refused, AclError) and "znode" in str(refused)
    finally:
        for authorizer in authorizers:
            authorizer.close()
