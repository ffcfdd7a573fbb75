"""ACLs end to end on a SASL listener: a broker with Kafka's authorizer, `super.users` and PLAIN
users; ACLs managed with `weir acl` as with kafka-acls.sh. A user with the right (prefixed)
ACLs produces and consumes with kcat, confluent-kafka, kafka-python and aiokafka; a user
without any sees no topics and is refused; an ACL removed takes effect on the next request;
`__consumer_offsets` cannot be deleted even by a super user; the ACLs survive a restart."""

from __future__ import annotations

import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from broker_process import BrokerProcess, require_tool
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.alter_replica_log_dirs.v2.request import (
    AlterReplicaLogDir,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirTopic,
)
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i32
from test_security_clients import MESSAGES, ROUND_TRIPS, Security

from weir.cli.broker_socket import BrokerConnection
from weir.protocol.apis import ApiKey
from weir.protocol.client_settings import ClientSecurity

with warnings.catch_warnings():
    # kafka-python reads its protocol schemas with importlib.resources.read_text, deprecated
    warnings.filterwarnings("ignore", "(read|open)_text is deprecated", DeprecationWarning)
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePatternFilter,
        ResourceType,
    )
    from kafka.errors import ClusterAuthorizationFailedError

TIMEOUT = 60
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
ALICE = Security("SASL_PLAINTEXT", "SASL_PLAINTEXT", ca=False, mechanism="PLAIN",
                 user="alice", password=USERS["alice"])  # fmt: skip


def sasl(user: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": USERS[user]}  # fmt: skip


def weir(broker: BrokerProcess, user: str, *args: str) -> subprocess.CompletedProcess[str]:
    settings = [f for k, v in sasl(user).items() for f in ("-X", f"{k}={v}")]
    return subprocess.run(
        [sys.executable, "-m", "weir.cli.main", *args, "--bootstrap-server",
         f"127.0.0.1:{broker.listeners['SASL_PLAINTEXT']}", *settings],
        capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("acls") / "broker", config={
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        **{f"sasl.plain.users.{user}": password for user, password in USERS.items()},
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        "num.partitions": 1,
        "group.initial.rebalance.delay.ms": 0,
    })  # fmt: skip
    process.start()
    added = weir(process, "admin", "acl", "add", "--allow-principal", "User:alice",
                 "--producer", "--consumer", "--topic", "acl-", "--group", "g-acl-",
                 "--resource-pattern-type", "PREFIXED")  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=acl-, " \
           "patternType=PREFIXED)`" in added.stdout  # fmt: skip
    yield process
    process.stop()


def address(broker: BrokerProcess) -> str:
    return f"127.0.0.1:{broker.listeners['SASL_PLAINTEXT']}"


@pytest.mark.parametrize("client", sorted(ROUND_TRIPS))
def test_a_user_with_prefixed_acls_produces_and_consumes(
    broker: BrokerProcess, client: str
) -> None:
    topic = f"acl-{client}"
    got = ROUND_TRIPS[client](broker, None, ALICE, topic)  # type: ignore[arg-type]
    assert got == MESSAGES


def test_without_acls_a_user_sees_no_topics_and_is_refused_at_once(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": address(broker), **sasl("admin"), "log_level": 0})
    admin.create_topics([NewTopic("acl-visible", 1, 1)])["acl-visible"].result(TIMEOUT)
    assert "acl-visible" in admin.list_topics(timeout=TIMEOUT).topics
    bob = AdminClient({"bootstrap.servers": address(broker), **sasl("bob"), "log_level": 0})
    assert bob.list_topics(timeout=TIMEOUT).topics == {}
    kcat = require_tool("kcat")
    anonymous = subprocess.run([kcat, "-b", f"127.0.0.1:{broker.listeners['PLAINTEXT']}", "-L",
                                "-J", "-m", "10"], capture_output=True, text=True,
                               timeout=TIMEOUT)  # fmt: skip
    assert anonymous.returncode == 0, anonymous.stderr
    assert '"topics":[]' in anonymous.stdout.replace(" ", "")
    started = time.monotonic()
    errors = produce(broker, "bob", "acl-visible")
    assert errors == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert time.monotonic() - started < 15
    refused = weir(broker, "bob", "acl", "add", "--allow-principal", "User:bob", "--topic", "x")
    assert refused.returncode == 1 and "authorization" in refused.stderr.lower(), refused.stderr


def test_transactions_and_groups_need_their_acls(broker: BrokerProcess) -> None:
    added = weir(broker, "admin", "acl", "add", "--allow-principal", "User:alice", "--producer",
                 "--transactional-id", "acl-tx", "--topic", "acl-")  # fmt: skip
    assert added.returncode == 0, added.stderr
    settings = {"bootstrap.servers": address(broker), **sasl("alice"), "log_level": 0}
    allowed = Producer({**settings, "transactional.id": "acl-tx"})
    allowed.init_transactions(TIMEOUT)
    allowed.begin_transaction()
    allowed.produce("acl-tx-topic", b"one")
    allowed.commit_transaction(TIMEOUT)
    with pytest.raises(KafkaException) as refused:
        Producer({**settings, "transactional.id": "other-tx"}).init_transactions(TIMEOUT)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    outsider = Consumer({**settings, "group.id": "not-g-acl", "auto.offset.reset": "earliest"})
    outsider.subscribe(["acl-tx-topic"])
    try:
        with pytest.raises(KafkaException) as refused:
            next_value(outsider)
        assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        outsider.close()
    kafka_admin = KafkaAdminClient(bootstrap_servers=address(broker), **kafka_python_sasl("bob"))
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            kafka_admin.describe_acls(ACLFilter(
                principal=None, host="*", operation=ACLOperation.ANY,
                permission_type=ACLPermissionType.ANY,
                resource_pattern=ResourcePatternFilter(ResourceType.ANY, None,
                                                       ACLResourcePatternType.ANY),
            ))  # fmt: skip
    finally:
        kafka_admin.close()


#: the revoked consumer's long poll, kept short so that the fetch in flight at the revocation ends
FETCH_WAIT_MS = 100


def test_a_removed_acl_refuses_the_next_fetch(broker: BrokerProcess) -> None:
    topic = "acl-revoked"
    assert produce(broker, "alice", topic) == []
    consumer = Consumer({"bootstrap.servers": address(broker), **sasl("alice"),
                         "group.id": "g-acl-revoked", "auto.offset.reset": "earliest",
                         "fetch.wait.max.ms": FETCH_WAIT_MS})  # fmt: skip
    consumer.subscribe([topic])
    try:
        assert next_value(consumer) == b"one"
        removed = weir(broker, "admin", "acl", "remove", "--allow-principal", "User:alice",
                       "--operation", "Read", "--topic", "acl-", "--resource-pattern-type",
                       "PREFIXED", "--force")  # fmt: skip
        assert removed.returncode == 0, removed.stderr
        assert "operation=READ" in removed.stdout
        # a fetch already waiting was authorized when it came in, as in Kafka: let it end
        time.sleep(3 * FETCH_WAIT_MS / 1000)
        assert produce(broker, "admin", topic) == []
        with pytest.raises(KafkaException) as refused:
            next_value(consumer)
        assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        consumer.close()
        added = weir(broker, "admin", "acl", "add", "--allow-principal", "User:alice",
                     "--operation", "Read", "--topic", "acl-", "--resource-pattern-type",
                     "PREFIXED")  # fmt: skip
        assert added.returncode == 0, added.stderr


def test_a_super_user_may_do_everything_but_delete_internal_topics(
    broker: BrokerProcess,
) -> None:
    assert produce(broker, "admin", "no-acls-here") == []
    consumer = Consumer({"bootstrap.servers": address(broker), **sasl("admin"),
                         "group.id": "admins", "auto.offset.reset": "earliest"})  # fmt: skip
    consumer.subscribe(["no-acls-here"])
    try:
        assert next_value(consumer) == b"one"
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    admin = AdminClient({"bootstrap.servers": address(broker), **sasl("admin"), "log_level": 0})
    with pytest.raises(KafkaException) as refused:
        admin.delete_topics(["__consumer_offsets"])["__consumer_offsets"].result(TIMEOUT)
    assert refused.value.args[0].code() == KafkaError.TOPIC_EXCEPTION
    assert "__consumer_offsets" in admin.list_topics(timeout=TIMEOUT).topics
    assert produce(broker, "admin", "__consumer_offsets") == [KafkaError.TOPIC_EXCEPTION]


def test_acls_survive_a_restart(broker: BrokerProcess) -> None:
    broker.restart()
    listed = weir(broker, "admin", "acl", "list", "--topic", "acl-", "--resource-pattern-type",
                  "PREFIXED")  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == [
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=acl-, "
        "patternType=PREFIXED)`: ",
        *(f" \t(principal=User:alice, host=*, operation={op}, permissionType=ALLOW) "
          for op in ("READ", "WRITE", "CREATE", "DESCRIBE")),
        "",
    ]  # fmt: skip
    assert produce(broker, "alice", "acl-after-restart") == []
    assert produce(broker, "bob", "acl-after-restart") == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_moving_a_replica_between_log_dirs_needs_alter_on_the_cluster(
    broker: BrokerProcess,
) -> None:
    log_dir = str(broker.data_dir.absolute())
    move = ("log-dirs", "move", "--broker", "0", "--topic", "acl-visible", "--partition", "0",
            "--dir", log_dir)  # fmt: skip
    refused = weir(broker, "bob", *move)  # its DescribeLogDirs first: DESCRIBE on the cluster
    assert refused.returncode == 1, refused.stderr
    assert "broker 0: CLUSTER_AUTHORIZATION_FAILED" in refused.stderr
    topic = AlterReplicaLogDirTopic(name=TopicName("acl-visible"), partitions=(i32(0),))
    request = AlterReplicaLogDirsRequest(dirs=(AlterReplicaLogDir(path=log_dir, topics=(topic,)),))
    answers = {}
    for user in ("bob", "admin"):
        with BrokerConnection("127.0.0.1", broker.listeners["SASL_PLAINTEXT"],
                              ClientSecurity.of(sasl(user)), timeout=TIMEOUT,
                              client_id="acl-test") as conn:  # fmt: skip
            response = conn.call(ApiKey.ALTER_REPLICA_LOG_DIRS, 2, request)
        answers[user] = [p.error_code for t in response.results for p in t.partitions]
    assert answers == {"bob": [ErrorCode.cluster_authorization_failed],
                       "admin": [ErrorCode.none]}  # already there: nothing to do  # fmt: skip
    allowed = weir(broker, "admin", *move)
    assert allowed.returncode == 0, allowed.stderr
    assert "Successfully started log directory move for: acl-visible-0-0" in allowed.stdout


# ---- helpers --------------------------------------------------------------------------------


def produce(broker: BrokerProcess, user: str, topic: str) -> list[int]:
    """Produce one record as `user`; the error codes of what failed (none: it was written)."""
    errors: list[int] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            errors.append(error.code())

    producer = Producer({"bootstrap.servers": address(broker), **sasl(user),
                         "message.timeout.ms": 10_000, "log_level": 0})  # fmt: skip
    producer.produce(topic, b"one", on_delivery=delivered)
    assert producer.flush(TIMEOUT) == 0
    return errors


def kafka_python_sasl(user: str) -> dict[str, str]:
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
            "sasl_plain_username": user, "sasl_plain_password": USERS[user]}  # fmt: skip


def next_value(consumer: Consumer) -> bytes | None:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is None:
            continue
        if message.error() is not None:
            raise KafkaException(message.error())
        return message.value()
    raise AssertionError("no record within the timeout")


def test_cluster_acls_are_added_listed_and_removed(broker: BrokerProcess) -> None:
    """`--cluster` names Kafka's CLUSTER resource (librdkafka's BROKER type, 4)."""
    pattern = "ResourcePattern(resourceType=CLUSTER, name=kafka-cluster, patternType=LITERAL)"
    added = weir(broker, "admin", "acl", "add", "--allow-principal", "User:carol",
                 "--operation", "Alter", "--cluster")  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert pattern in added.stdout and "User:carol" in added.stdout, added.stdout
    listed = weir(broker, "admin", "acl", "list", "--cluster")
    assert listed.returncode == 0 and "User:carol" in listed.stdout, listed.stdout + listed.stderr
    removed = weir(broker, "admin", "acl", "remove", "--allow-principal", "User:carol",
                   "--operation", "Alter", "--cluster", "--force")  # fmt: skip
    assert removed.returncode == 0, removed.stderr
    listed = weir(broker, "admin", "acl", "list", "--cluster")
    assert "User:carol" not in listed.stdout, listed.stdout
