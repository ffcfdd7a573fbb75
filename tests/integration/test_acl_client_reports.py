"""What a client is told by a broker with ACLs: the console commands report each refusal (an
idempotent producer without IdempotentWrite, a topic or group without ACLs, an unknown topic
with auto-creation off) in one line naming Kafka's error and exit 1, without a traceback or a
hang; an admin client asking for authorized operations (KIP-430) gets the principal's; and the
agent refused by the ACLs says so and delivers once they allow it."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_process import AgentProcess
from broker_process import BrokerProcess
from confluent_kafka import Consumer, TopicCollection
from confluent_kafka.admin import AclOperation, AdminClient, NewTopic

TIMEOUT = 60
USERS = {"admin": "admin-secret", "bob": "bob-secret"}


def sasl(user: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": USERS[user]}  # fmt: skip


def weir(broker: BrokerProcess, user: str, *args: str) -> subprocess.Popen[str]:
    """`weir ARGS` as `user`, started; its stdin to be given with `communicate`."""
    settings = [f for k, v in sasl(user).items() for f in ("-X", f"{k}={v}")]
    process = subprocess.Popen(
        [sys.executable, "-m", "weir.cli.main", *args, "--bootstrap-server",
         broker.bootstrap, *settings],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    return process


def admin_client(broker: BrokerProcess, user: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap,
                        **sasl(user), "log_level": 0})  # fmt: skip


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("acl-reports") / "broker", config={
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        **{f"sasl.plain.users.{user}": password for user, password in USERS.items()},
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        "auto.create.topics.enable": False,
        "num.partitions": 1,
    })  # fmt: skip
    process.start()
    admin = admin_client(process, "admin")
    for future in admin.create_topics([NewTopic("readable"), NewTopic("secret"),
                                         NewTopic("agent-bound")]).values():
        future.result(TIMEOUT)
    added = weir(process, "admin", "acl", "add", "--allow-principal", "User:bob", "--operation",
                 "Read", "--topic", "readable")  # fmt: skip
    _, err = added.communicate(timeout=TIMEOUT)
    assert added.returncode == 0, err
    yield process
    process.stop()


#: command (as bob unless said), stdin, the Kafka error it must name
REFUSALS = {
    "idempotent producer": (["produce", "readable"], "one\n", "CLUSTER_AUTHORIZATION_FAILED"),
    "producer": (["produce", "readable", "--acks", "1"], "one\n", "TOPIC_AUTHORIZATION_FAILED"),
    "consumer, topic": (["consume", "secret", "-e"], "", "TOPIC_AUTHORIZATION_FAILED"),
    "consumer, group": (["consume", "readable", "--group", "g", "-e"], "",
                        "GROUP_AUTHORIZATION_FAILED"),
    "topic delete": (["topic", "delete", "readable"], "", "TOPIC_AUTHORIZATION_FAILED"),
    "admin produce, unknown topic": (["produce", "nowhere"], "one\n",
                                     "UNKNOWN_TOPIC_OR_PARTITION"),
    "admin consume, unknown topic": (["consume", "nowhere", "-e"], "",
                                     "UNKNOWN_TOPIC_OR_PARTITION"),
}  # fmt: skip


def test_console_commands_report_a_refusal_in_one_line(broker: BrokerProcess) -> None:
    running = {
        case: weir(broker, "admin" if case.startswith("admin") else "bob", *command)
        for case, (command, _, _) in REFUSALS.items()
    }
    reports = {
        case: (p.communicate(REFUSALS[case][1], timeout=TIMEOUT), p.returncode)
        for case, p in running.items()
    }  # a command that hangs fails here, after TIMEOUT
    for case, ((out, err), status) in reports.items():
        name = REFUSALS[case][2]
        assert (status, out) == (1, ""), (case, err)
        assert err.startswith(f"weir: {name}: ") and err.count("\n") == 1, (case, err)


def test_authorized_operations_as_an_admin_client_asks_for_them(broker: BrokerProcess) -> None:
    bob, admin = admin_client(broker, "bob"), admin_client(broker, "admin")
    topics = TopicCollection(["readable"])
    read = bob.describe_topics(topics, include_authorized_operations=True)["readable"]
    assert read.result(TIMEOUT).authorized_operations == [AclOperation.READ, AclOperation.DESCRIBE]
    every = admin.describe_topics(topics, include_authorized_operations=True)["readable"]
    assert len(every.result(TIMEOUT).authorized_operations) == 8
    not_asked = admin.describe_topics(topics)["readable"].result(TIMEOUT)
    assert not_asked.authorized_operations is None
    cluster = admin.describe_cluster(include_authorized_operations=True).result(TIMEOUT)
    assert AclOperation.IDEMPOTENT_WRITE in cluster.authorized_operations
    assert len(cluster.authorized_operations) == 7
    assert not bob.describe_cluster(include_authorized_operations=True).result(
        TIMEOUT
    ).authorized_operations


def test_the_agent_reports_refused_acls_and_delivers_once_they_allow(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    """Without Write anywhere the agent's idempotent producer is refused (a fatal error in
    librdkafka): the agent says so in its status, keeps the events, and delivers them once an
    ACL allows it, without a restart."""
    table = "".join(f'"{k}" = "{v}"\n' for k, v in sasl("bob").items())
    agent = AgentProcess(tmp_path / "agent", broker.bootstrap, config=f"[producer]\n{table}")
    agent.start()
    try:
        sent = subprocess.run([sys.executable, "-m", "weir.cli.main", "agent", "send",
                               "agent-bound", "--socket", str(agent.socket)],
                              input="one\ntwo\n", capture_output=True, text=True,
                              timeout=TIMEOUT)  # fmt: skip
        assert sent.returncode == 0, sent.stderr
        status = wait_for(agent, lambda s: s["last_error"] is not None)
        assert status["last_error"].split(":")[0] in (
            "CLUSTER_AUTHORIZATION_FAILED", "TOPIC_AUTHORIZATION_FAILED"), status  # fmt: skip
        acl(broker, "add", "--operation", "Write")
        assert read_values(broker, "agent-bound", 2) == [b"one", b"two"]
        assert wait_for(agent, lambda s: s["last_error"] is None)["last_error"] is None
    finally:
        agent.stop()
        acl(broker, "remove", "--operation", "Write", "--force")
    log = (agent.directory / "agent.log").read_text()
    for refusal in ("CLUSTER_AUTHORIZATION_FAILED", "TOPIC_AUTHORIZATION_FAILED"):
        assert log.count(f"the cluster refuses the agent: {refusal}") <= 1, log


def acl(broker: BrokerProcess, action: str, *args: str) -> None:
    done = weir(broker, "admin", "acl", action, "--allow-principal", "User:bob", "--topic",
                "agent-bound", *args)  # fmt: skip
    _, err = done.communicate(timeout=TIMEOUT)
    assert done.returncode == 0, err


def wait_for(agent: AgentProcess, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    deadline = time.monotonic() + TIMEOUT
    while not done(status := agent.status()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return status


def read_values(broker: BrokerProcess, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, **sasl("admin"),
                         "group.id": "reader", "auto.offset.reset": "earliest"})  # fmt: skip
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values
