"""Audit on a real broker, as an operator checks it: two clients (confluent-kafka as alice, and
kafka-python as bob, each with a client id of its own, over SASL/PLAIN) produce and consume,
then `weir audit who-writes` and `who-reads` name each with the bytes the broker took from and
sent to it.

What the broker counts, and so what is checked exactly: a produce counts the record batch each
partition received, as sent; a fetch the record batches sent. Each partition here is written by
one client only and read from its start to its end by each reader, once: its size on disk (the
batches as they arrived, `weir log-dirs describe`) is what its producer wrote and what each of
its readers was sent.
"""

from __future__ import annotations

import json
import re
import time
import warnings
from typing import Any

from broker_process import BrokerProcess, table_rows, weir
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from waiting import poll

with warnings.catch_warnings():
    # kafka-python 3.0.12 reads its protocol schemas with the deprecated
    # importlib.resources.read_text (which calls open_text) while importing
    warnings.filterwarnings("ignore", "(read|open)_text is deprecated", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as PythonTopicPartition

TOPIC = "ledger"
USERS = {"alice": "alice-secret", "bob": "bob-secret"}
ALICE_RECORDS, ALICE_VALUE = 300, 100  # to partition 0, as client id "billing"
BOB_RECORDS, BOB_VALUE = 200, 250  # to partition 1, as client id "reports"
TIMEOUT = 30


def sasl_broker(broker_factory: Any, name: str = "audited", **config: object) -> BrokerProcess:
    broker: BrokerProcess = broker_factory(
        name,
        listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        **{"sasl.enabled.mechanisms": "PLAIN", "audit.enable": True, "audit.flush.interval.ms": 300,
           **{f"sasl.plain.users.{user}": password for user, password in USERS.items()},
           **config},
    )  # fmt: skip
    return broker


def sasl_address(broker: BrokerProcess) -> str:
    return f"127.0.0.1:{broker.listeners['SASL_PLAINTEXT']}"


def confluent_settings(broker: BrokerProcess, user: str) -> dict[str, Any]:
    return {"bootstrap.servers": sasl_address(broker), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": USERS[user]}  # fmt: skip


def python_settings(broker: BrokerProcess, user: str) -> dict[str, Any]:
    return {"bootstrap_servers": sasl_address(broker), "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN", "sasl_plain_username": user,
            "sasl_plain_password": USERS[user]}  # fmt: skip


def create_topic(broker: BrokerProcess, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(TIMEOUT)


def alice_produces(broker: BrokerProcess, topic: str = TOPIC) -> None:
    producer = Producer({**confluent_settings(broker, "alice"), "client.id": "billing",
                         "linger.ms": 20})  # fmt: skip
    for i in range(ALICE_RECORDS):
        producer.produce(topic, b"a" * ALICE_VALUE, key=b"%d" % i, partition=0)
    assert producer.flush(TIMEOUT) == 0


def bob_produces(broker: BrokerProcess) -> None:
    producer = KafkaProducer(client_id="reports", linger_ms=20, **python_settings(broker, "bob"))
    for i in range(BOB_RECORDS):
        producer.send(TOPIC, b"b" * BOB_VALUE, key=b"%d" % i, partition=1)
    producer.flush(TIMEOUT)
    producer.close()


def alice_reads_everything(broker: BrokerProcess) -> None:
    consumer = Consumer({**confluent_settings(broker, "alice"), "client.id": "billing",
                         "group.id": "billing-readers", "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in (0, 1)])
    read = 0
    deadline = time.monotonic() + TIMEOUT
    while read < ALICE_RECORDS + BOB_RECORDS and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None:
            assert message.error() is None, message.error()
            read += 1
    consumer.close()
    assert read == ALICE_RECORDS + BOB_RECORDS


def bob_reads_partition_0(broker: BrokerProcess) -> None:
    consumer = KafkaConsumer(client_id="reports", group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest",
                             **python_settings(broker, "bob"))  # fmt: skip
    consumer.assign([PythonTopicPartition(TOPIC, 0)])
    read = 0
    deadline = time.monotonic() + TIMEOUT
    while read < ALICE_RECORDS and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            read += len(records)
    consumer.close()
    assert read == ALICE_RECORDS


def partition_sizes(broker: BrokerProcess) -> dict[int, int]:
    """Each partition of TOPIC's size on disk, as DescribeLogDirs reports it."""
    done = weir("log-dirs", "describe", "--bootstrap-server", broker.bootstrap)
    assert done.returncode == 0, done.stderr
    sizes = {}
    for log_dir in json.loads(done.stdout)["brokers"][0]["logDirs"]:
        for replica in log_dir["partitions"]:
            topic, _, index = replica["partition"].rpartition("-")
            if topic == TOPIC:
                sizes[int(index)] = replica["size"]
    return sizes


def audit(broker: BrokerProcess, action: str, topic: str, *more: str) -> Any:
    done = weir("audit", action, topic, "--bootstrap-server", broker.bootstrap, "--json", *more)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["clients"]


def summary(clients: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(c["principal"], c["client_id"], c["address"], c["bytes"], c["records"])
            for c in clients]  # fmt: skip


def test_who_writes_and_who_reads_name_each_client_with_its_bytes(broker_factory: Any) -> None:
    broker = sasl_broker(broker_factory)
    create_topic(broker, TOPIC, 2)
    alice_produces(broker)
    bob_produces(broker)
    alice_reads_everything(broker)
    bob_reads_partition_0(broker)
    sizes = partition_sizes(broker)
    assert sizes[0] > ALICE_RECORDS * ALICE_VALUE and sizes[1] > BOB_RECORDS * BOB_VALUE

    writers = [("User:bob", "reports", "127.0.0.1", sizes[1], BOB_RECORDS),
               ("User:alice", "billing", "127.0.0.1", sizes[0], ALICE_RECORDS)]  # fmt: skip
    readers = [("User:alice", "billing", "127.0.0.1", sizes[0] + sizes[1],
                ALICE_RECORDS + BOB_RECORDS),
               ("User:bob", "reports", "127.0.0.1", sizes[0], ALICE_RECORDS)]  # fmt: skip
    poll(lambda: summary(audit(broker, "who-writes", TOPIC)) == writers, TIMEOUT,
         "who-writes to name alice and bob with their bytes",
         detail=lambda: str(audit(broker, "who-writes", TOPIC)))  # fmt: skip
    poll(lambda: summary(audit(broker, "who-reads", TOPIC)) == readers, TIMEOUT,
         "who-reads to name alice and bob with their bytes",
         detail=lambda: str(audit(broker, "who-reads", TOPIC)))  # fmt: skip

    # the table, through the SASL listener with the client settings every command takes
    done = weir("audit", "who-reads", TOPIC, "--bootstrap-server", sasl_address(broker),
                "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=PLAIN",
                "-X", "sasl.username=alice", "-X", "sasl.password=alice-secret")  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = table_rows(done.stdout, "PRINCIPAL")
    assert [(r["PRINCIPAL"], r["CLIENT-ID"], r["ADDRESS"], int(r["BYTES"]), int(r["RECORDS"]))
            for r in rows] == readers  # fmt: skip
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\dZ", r["FIRST-MINUTE"]) for r in rows)
    assert all(r["FIRST-MINUTE"] <= r["LAST-MINUTE"] for r in rows)

    # the minutes asked for
    assert summary(audit(broker, "who-writes", TOPIC, "--since", "1h")) == writers
    assert audit(broker, "who-writes", TOPIC, "--until", "2000-01-01T00:00Z") == []
    assert audit(broker, "who-writes", TOPIC, "--since", "2999-01-01T00:00") == []


def test_a_topic_nobody_read_shows_an_empty_table(broker_factory: Any) -> None:
    broker = sasl_broker(broker_factory, "quiet")
    create_topic(broker, "quiet", 1)
    alice_produces(broker, "quiet")
    poll(lambda: audit(broker, "who-writes", "quiet"), TIMEOUT, "alice's produce in __audit")
    done = weir("audit", "who-reads", "quiet", "--bootstrap-server", broker.bootstrap)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "PRINCIPAL  CLIENT-ID  ADDRESS  BYTES  RECORDS  FIRST-MINUTE  LAST-MINUTE"
    ]
    assert audit(broker, "who-reads", "no-such-topic") == []


def test_an_unreachable_bootstrap_server_is_a_clear_error() -> None:
    done = weir("audit", "who-writes", TOPIC, "--bootstrap-server", "127.0.0.1:1", timeout=60)
    assert done.returncode == 1
    assert done.stdout == ""
    assert "127.0.0.1:1: cannot connect" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_bad_time_is_refused_by_the_command_line() -> None:
    done = weir("audit", "who-reads", TOPIC, "--since", "yesterday-ish")
    assert done.returncode == 2
    assert "neither an ISO time" in done.stderr


def test_counts_are_written_at_a_clean_shutdown_and_a_restart_adds_to_them(
    broker_factory: Any,
) -> None:
    """With the default interval of a minute nothing is written before the broker stops: the
    shutdown writes it. The restarted broker's counts of the same minute add to the earlier."""
    broker = sasl_broker(broker_factory, "restarted", **{"audit.flush.interval.ms": 60_000})
    create_topic(broker, TOPIC, 2)
    alice_produces(broker)
    broker.restart()
    alice_produces(broker)
    broker.restart()
    clients = audit(broker, "who-writes", TOPIC)
    assert summary(clients) == [("User:alice", "billing", "127.0.0.1", partition_sizes(broker)[0],
                                 2 * ALICE_RECORDS)]  # fmt: skip
    assert "Traceback" not in broker.logs()


def test_with_audit_off_nothing_is_written(broker_factory: Any) -> None:
    broker = sasl_broker(broker_factory, "unaudited", **{"audit.enable": False})
    create_topic(broker, TOPIC, 2)
    alice_produces(broker)
    time.sleep(1)  # several flush intervals
    done = weir("audit", "who-writes", TOPIC, "--bootstrap-server", broker.bootstrap)
    assert done.returncode == 0, done.stderr
    assert "nothing in __audit" in done.stderr
    listed = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=TIMEOUT)
    assert "__audit" not in listed.topics


def produce_one(broker: BrokerProcess, user: str, client_id: str, topic: str) -> list[int]:
    """One record produced as `user` with `client_id`: the error codes of what failed."""
    errors: list[int] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            errors.append(error.code())

    producer = Producer({**confluent_settings(broker, user), "client.id": client_id,
                         "message.timeout.ms": 10_000})  # fmt: skip
    producer.produce(topic, b"not a count", key=b"forged", on_delivery=delivered)
    assert producer.flush(TIMEOUT) == 0
    return errors


def test_only_brokers_write_the_audit_topic(broker_factory: Any) -> None:
    """`__audit` is internal: no client writes it, a super user neither; the audit writer's
    client id is let in with ClusterAction on the cluster only (a super user has it), and a
    record that is not a count is skipped by the reader."""
    broker = sasl_broker(broker_factory, "guarded", **{
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:bob"})  # fmt: skip
    admin = AdminClient(confluent_settings(broker, "bob"))
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(TIMEOUT)
    assert produce_one(broker, "bob", "reports", TOPIC) == []
    as_bob = ["--bootstrap-server", sasl_address(broker), "-X", "security.protocol=SASL_PLAINTEXT",
              "-X", "sasl.mechanism=PLAIN", "-X", "sasl.username=bob",
              "-X", "sasl.password=bob-secret"]  # fmt: skip

    def writers() -> str:
        done = weir("audit", "who-writes", TOPIC, *as_bob)
        assert done.returncode == 0, done.stderr
        return done.stdout

    poll(lambda: "User:bob" in writers(), TIMEOUT, "bob's produce in __audit")
    added = weir("acl", "add", "--allow-principal", "User:alice", "--producer", "--topic",
                 "__audit", *as_bob)  # fmt: skip
    assert added.returncode == 0, added.stderr
    for user in ("alice", "bob"):  # Write on the topic, or a super user: still internal
        assert produce_one(broker, user, "reports", "__audit") == [KafkaError.TOPIC_EXCEPTION]
    writer = "weir-audit-writer"
    assert produce_one(broker, "alice", writer, "__audit") == [  # no ClusterAction
        KafkaError.TOPIC_AUTHORIZATION_FAILED]  # fmt: skip
    assert produce_one(broker, "bob", writer, "__audit") == []
    done = weir("audit", "who-writes", TOPIC, *as_bob)
    assert done.returncode == 0, done.stderr
    assert "skipping a record of __audit that is not an audit count" in done.stderr
    rows = table_rows(done.stdout, "PRINCIPAL")
    assert [(r["PRINCIPAL"], r["CLIENT-ID"]) for r in rows] == [("User:bob", "reports")]
