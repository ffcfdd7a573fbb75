"""weir's own clients on a SASL_SSL listener with SCRAM-SHA-512: the agent ships events, the
consumer framework processes a topic exactly once into another (its transactional producer
authenticates too), `weir group list` and `weir txn list` answer; a wrong password is a clear
authentication error and a non-zero exit, quickly. What they wrote is read back over the
broker's PLAINTEXT listener."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent_process import AgentProcess, create_topic, read_topic
from broker_process import BrokerProcess
from confluent_kafka import Consumer, Producer, TopicPartition
from consumer_processes import HANDLERS, ConsumerProcess
from security_setup import (
    SCRAM_PASSWORD,
    SCRAM_USER,
    Certificates,
    sasl_ssl_settings,
    secure_fixtures,
)

TIMEOUT = 60
#: how long a client given a wrong password may take to say so and exit
REFUSAL_WITHIN_S = 20
WRONG = "n0t-the-passw0rd"


certs, broker = secure_fixtures("secure")


def sasl_ssl(broker: BrokerProcess) -> str:
    return f"127.0.0.1:{broker.listeners['SASL_SSL']}"


def plaintext(broker: BrokerProcess) -> str:
    return f"127.0.0.1:{broker.listeners['PLAINTEXT']}"


def java_properties(path: Path, certs: Certificates, password: str = SCRAM_PASSWORD) -> Path:
    """A --command-config file as a Java client's is written (JAAS config, PEM truststore)."""
    path.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{SCRAM_USER}" password="{password}";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={certs.ca}\n"
    )
    return path


def weir(*args: str | Path, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "weir.cli.main", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def test_the_agent_ships_events_over_sasl_ssl_and_shows_no_password(
    broker: BrokerProcess, certs: Certificates, tmp_path: Path
) -> None:
    create_topic(plaintext(broker), "agent-secured", 1)
    settings = sasl_ssl_settings(certs)
    password = settings.pop("sasl.password")
    table = "".join(f'"{k}" = "{v}"\n' for k, v in settings.items())
    agent = AgentProcess(tmp_path / "agent", sasl_ssl(broker), config=f"[producer]\n{table}",
                         args=("-X", f"sasl.password={password}"))  # fmt: skip
    agent.start()
    try:
        lines = "".join(f"event {i}\n" for i in range(20))
        sent = subprocess.run(
            [sys.executable, "-m", "weir.cli.main", "agent", "send", "agent-secured",
             "--socket", str(agent.socket)],
            input=lines, capture_output=True, text=True, timeout=TIMEOUT,
        )  # fmt: skip
        assert sent.returncode == 0, sent.stderr
        records = read_topic(plaintext(broker), "agent-secured", 1, 20)
        assert [value for _, _, value in records] == [f"event {i}".encode() for i in range(20)]
        status = agent.status()
        assert status["cluster_reachable"] is True
        assert status["security"] == {**settings, "sasl.password": "[hidden]"}
    finally:
        agent.stop()
    shown = json.dumps(status) + (agent.directory / "agent.log").read_text()
    assert SCRAM_PASSWORD not in shown


def test_the_consumer_framework_processes_a_topic_exactly_once_over_sasl_ssl(
    broker: BrokerProcess, certs: Certificates, tmp_path: Path
) -> None:
    create_topic(plaintext(broker), "eos-in", 1)
    create_topic(plaintext(broker), "eos-out", 1)
    producer = Producer({"bootstrap.servers": plaintext(broker)})
    for i in range(50):
        producer.produce("eos-in", f"input {i}".encode())
    assert producer.flush(TIMEOUT) == 0
    properties = java_properties(tmp_path / "client.properties", certs)
    framework = ConsumerProcess(
        sasl_ssl(broker), f"{HANDLERS}:result", "eos-in", "eos-secured", tmp_path / "eos.log",
        "--mode", "exactly-once", "--output-topic", "eos-out", "--command-config", str(properties),
    )  # fmt: skip
    framework.start()
    try:
        results = read_committed(plaintext(broker), "eos-out", 50)
    finally:
        assert framework.stop() == 0, framework.logs()
    assert sorted(results) == sorted(f"result:input {i}".encode() for i in range(50))


def read_committed(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "checker",
                         "isolation.level": "read_committed"})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    while len(got) < expected and time.monotonic() < deadline:
        got += [m.value() or b"" for m in consumer.consume(100, 0.5) if m.error() is None]
    consumer.close()
    return got


def test_group_list_and_txn_list_over_sasl_ssl(
    broker: BrokerProcess, certs: Certificates, tmp_path: Path
) -> None:
    settings = {"bootstrap.servers": sasl_ssl(broker), **sasl_ssl_settings(certs)}
    producer = Producer({**settings, "transactional.id": "secured-txn"})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    producer.produce("txn-secured", b"committed")
    producer.commit_transaction(TIMEOUT)
    consumer = Consumer({**settings, "group.id": "secured-group"})
    consumer.commit(offsets=[TopicPartition("txn-secured", 0, 1)], asynchronous=False)
    consumer.close()
    properties = java_properties(tmp_path / "client.properties", certs)
    secured = ("--bootstrap-server", sasl_ssl(broker), "--command-config", properties)
    groups = weir("group", "list", *secured)
    assert groups.returncode == 0, groups.stderr
    assert "secured-group" in groups.stdout.split()
    transactions = weir("txn", "list", *secured)
    assert transactions.returncode == 0, transactions.stderr
    assert "secured-txn" in transactions.stdout.split()
    described = weir("txn", "describe", "--transactional-id", "secured-txn", *secured)
    assert described.returncode == 0, described.stderr
    assert "CompleteCommit" in described.stdout


@pytest.mark.parametrize(
    "command",
    [("group", "list"), ("txn", "list")],
    ids=lambda c: " ".join(c),
)
def test_a_wrong_password_is_an_authentication_error_and_a_non_zero_exit(
    broker: BrokerProcess, certs: Certificates, tmp_path: Path, command: tuple[str, ...]
) -> None:
    properties = java_properties(tmp_path / "client.properties", certs, password=WRONG)
    started = time.monotonic()
    done = weir(*command, "--bootstrap-server", sasl_ssl(broker), "--command-config", properties)
    assert time.monotonic() - started < REFUSAL_WITHIN_S
    assert done.returncode == 1, done.stdout
    assert "authentication failed" in done.stderr.lower(), done.stderr
    assert WRONG not in done.stderr


def test_the_consumer_framework_stops_on_a_wrong_password(
    broker: BrokerProcess, certs: Certificates, tmp_path: Path
) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "weir.cli.main", "consumer", "run", f"{HANDLERS}:slow",
         "--topic", "eos-in", "--group", "refused", "--bootstrap-server", sasl_ssl(broker),
         "--command-config", java_properties(tmp_path / "client.properties", certs),
         "-X", f"sasl.password={WRONG}"],
        capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert time.monotonic() - started < REFUSAL_WITHIN_S
    assert done.returncode == 1
    assert "weir: consumer failed" in done.stderr and "Authentication failed" in done.stderr
