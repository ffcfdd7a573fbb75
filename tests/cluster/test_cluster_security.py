"""A secured cluster with real processes: three brokers whose only listener is SASL_SSL with
SCRAM-SHA-512, for clients and for their own traffic (replication, the controller's requests),
the brokers authenticating as a SCRAM user made in ZooKeeper before they start, as Kafka's
documentation does it (`weir user create --zookeeper`).

A second cluster keeps the two apart, as many deployments do: brokers talk over mutual TLS on an
INTERNAL listener (`inter.broker.listener.name`, `ssl.client.auth = required`) while clients use
SASL_SSL with PLAIN on CLIENT; each listener's clients are told that listener's addresses.

Checked as a user would: the registrations in ZooKeeper carry the SASL_SSL endpoint only; a topic
with replication factor 3 gets all three replicas in sync (followers fetch over TLS after
SCRAM); a user created through broker 1 (AlterUserScramCredentials) lands in /config/users in
Kafka's layout and authenticates on broker 3; a wrong password is refused; confluent-kafka
produces with acks=all and reads everything back, across a kill -9 of the partition's leader;
a user deleted in ZooKeeper (`weir user delete --zookeeper`) is gone from the brokers' answers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from cluster_brokers import CHROOT, ClusterBroker, ZooKeeperView, poll, start_together
from cluster_processes import free_port
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

INTEGRATION = Path(__file__).resolve().parents[1] / "integration"
if str(INTEGRATION) not in sys.path:
    sys.path.insert(0, str(INTEGRATION))

from security_setup import KEY_PASSWORD, Certificates, make_certificates  # noqa: E402

BROKER_USER, BROKER_PASSWORD = "broker", "broker-secret"
CLIENT_USER, CLIENT_PASSWORD = "alice", "alice-secret"
MECHANISM = "SCRAM-SHA-512"
SESSION_TIMEOUT_MS = 4000
JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    f'username="{BROKER_USER}" password="{BROKER_PASSWORD}";'
)


class SecuredBroker(ClusterBroker):
    """A cluster broker configured by `listeners` alone (no `--listen`, which means one
    PLAINTEXT listener), on a port kept across restarts."""

    def command(self) -> list[str]:
        command = super().command()
        at = command.index("--listen")
        return command[:at] + command[at + 2 :]

    def wait_ready(self, timeout: float = 60) -> None:
        """The ready file's first line is the first listener's address; with several listeners
        one `NAME://HOST:PORT` line follows for each."""
        super().wait_ready(timeout)
        first = self.ready_path.read_text().splitlines()[0]
        self.port = int(first.rsplit(":", 1)[1])


def broker_config(certs: Certificates, port: int) -> dict[str, object]:
    return {
        "listeners": f"SASL_SSL://127.0.0.1:{port}",
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config": JAAS,
        "ssl.keystore.location": str(certs.broker_keystore),
        "ssl.key.password": KEY_PASSWORD,
        "ssl.truststore.location": str(certs.ca),
        "zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS,
        "offsets.topic.num.partitions": 1,
        "group.initial.rebalance.delay.ms": 0,
    }


def client_settings(
    certs: Certificates, brokers: list[ClusterBroker], user: str, password: str
) -> dict[str, Any]:
    return {
        "bootstrap.servers": ",".join(b.bootstrap for b in brokers),
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(certs.ca),
        "sasl.mechanism": MECHANISM,
        "sasl.username": user,
        "sasl.password": password,
    }


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


def weir(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "weir.cli.main", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def refusal(settings: dict[str, Any]) -> str:
    """The errors a client with `settings` reports (it must not get metadata)."""
    errors: list[KafkaError] = []
    producer = Producer({**settings, "error_cb": errors.append})
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    with pytest.raises(KafkaException):
        producer.list_topics(timeout=1)
    return " ".join(f"{e.name()} {e.str()}" for e in errors)


def in_sync_everywhere(admin: AdminClient, topic: str) -> bool:
    metadata = admin.list_topics(topic, timeout=5)
    partitions = metadata.topics[topic].partitions
    return bool(partitions) and all(len(p.isrs) == 3 for p in partitions.values())


def produce(settings: dict[str, Any], topic: str, values: list[bytes]) -> None:
    errors: list[Any] = []
    producer = Producer({**settings, "acks": "all", "enable.idempotence": True})
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, _: err and errors.append(err))
    assert producer.flush(60) == 0
    assert errors == []


def read_all(settings: dict[str, Any], topic: str, count: int) -> list[bytes]:
    consumer = Consumer({**settings, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


@pytest.mark.slow  # about 30 s: three brokers, a ZooKeeper session expiry
def test_a_sasl_ssl_scram_cluster_replicates_authenticates_and_fails_over(
    zookeeper: Any, zk_view: ZooKeeperView, cluster_brokers: Any, certs: Certificates
) -> None:
    connect = f"{zookeeper.connect}{CHROOT}"
    made = weir("user", "create", BROKER_USER, "--zookeeper", connect,
                "--mechanism", MECHANISM, "--password", BROKER_PASSWORD)  # fmt: skip
    assert made.returncode == 0, made.stderr
    stored = zk_view.json(f"/config/users/{BROKER_USER}")
    assert stored["version"] == 1
    assert stored["config"][MECHANISM].startswith("salt=")
    assert ",iterations=4096" in stored["config"][MECHANISM]

    brokers: list[ClusterBroker] = []
    for node_id in (1, 2, 3):
        port = free_port()
        broker = SecuredBroker(cluster_brokers.directory / f"broker-{node_id}", node_id, connect,
                               config=broker_config(certs, port), port=port)  # fmt: skip
        cluster_brokers.brokers.append(broker)
        brokers.append(broker)
    start_together(brokers)
    registration = zk_view.json("/brokers/ids/1")
    assert registration["endpoints"] == [f"SASL_SSL://127.0.0.1:{brokers[0].port}"]
    assert registration["listener_security_protocol_map"] == {"SASL_SSL": "SASL_SSL"}

    # a user created through broker 1 authenticates on broker 3
    admin = AdminClient(client_settings(certs, brokers[:1], BROKER_USER, BROKER_PASSWORD))
    poll(lambda: len(admin.list_topics(timeout=5).brokers) == 3, 30, "three brokers listed")
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    upsertion = UserScramCredentialUpsertion(CLIENT_USER, info, CLIENT_PASSWORD.encode())
    for future in admin.alter_user_scram_credentials([upsertion]).values():
        future.result(30)
    assert MECHANISM in zk_view.json(f"/config/users/{CLIENT_USER}")["config"]
    listed = weir("user", "list", "--zookeeper", connect)
    assert listed.returncode == 0, listed.stderr
    assert {line.split()[0] for line in listed.stdout.splitlines()} == {BROKER_USER, CLIENT_USER}
    alice = client_settings(certs, brokers[2:], CLIENT_USER, CLIENT_PASSWORD)
    assert len(AdminClient(alice).list_topics(timeout=15).brokers) == 3
    assert "AUTHENTICATION" in refusal(
        client_settings(certs, brokers[2:], CLIENT_USER, "not-the-password")
    )

    # replication factor 3 over SASL_SSL, acks=all
    topic = "secured"
    created = admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])
    created[topic].result(30)
    poll(lambda: in_sync_everywhere(admin, topic), 30, f"{topic}: three in-sync replicas")
    everyone = client_settings(certs, brokers, CLIENT_USER, CLIENT_PASSWORD)
    first = [f"before-{i}".encode() for i in range(200)]
    produce(everyone, topic, first)

    # kill -9 the leader: another replica leads, writes and reads go on
    leader_id = admin.list_topics(topic, timeout=5).topics[topic].partitions[0].leader
    by_id = {b.node_id: b for b in brokers}
    by_id[leader_id].kill()
    survivors = [b for b in brokers if b.node_id != leader_id]
    survivor_admin = AdminClient(client_settings(certs, survivors, BROKER_USER, BROKER_PASSWORD))

    def new_leader() -> int | None:
        partition = survivor_admin.list_topics(topic, timeout=5).topics[topic].partitions[0]
        return partition.leader if partition.leader not in (-1, leader_id) else None

    poll(new_leader, 30, "a new leader")
    second = [f"after-{i}".encode() for i in range(100)]
    produce(client_settings(certs, survivors, CLIENT_USER, CLIENT_PASSWORD), topic, second)
    read = read_all(client_settings(certs, survivors, CLIENT_USER, CLIENT_PASSWORD), topic, 300)
    assert read == first + second

    # a user deleted in ZooKeeper is gone from what the brokers describe
    deleted = weir("user", "delete", CLIENT_USER, "--zookeeper", connect)
    assert deleted.returncode == 0, deleted.stderr

    def users_described() -> set[str]:
        described = survivor_admin.describe_user_scram_credentials()
        assert isinstance(described, Future)
        return set(described.result(10))

    poll(lambda: users_described() == {BROKER_USER}, 10, f"{CLIENT_USER} deleted everywhere")
    for broker in survivors:
        assert "Traceback" not in broker.logs(), json.dumps(broker.logs()[-3000:])


def test_mutual_tls_between_brokers_and_sasl_for_clients_on_separate_listeners(
    zookeeper: Any, zk_view: ZooKeeperView, cluster_brokers: Any, certs: Certificates
) -> None:
    connect = f"{zookeeper.connect}{CHROOT}"
    brokers: list[ClusterBroker] = []
    client_ports: dict[int, int] = {}
    for node_id in (1, 2):
        internal, client_ports[node_id] = free_port(), free_port()
        config = {
            "listeners": f"INTERNAL://127.0.0.1:{internal},CLIENT://127.0.0.1:{client_ports[node_id]}",
            "listener.security.protocol.map": "INTERNAL:SSL,CLIENT:SASL_SSL",
            "inter.broker.listener.name": "INTERNAL",
            "listener.name.internal.ssl.client.auth": "required",
            "sasl.enabled.mechanisms": "PLAIN",
            f"sasl.plain.users.{CLIENT_USER}": CLIENT_PASSWORD,
            "ssl.keystore.location": str(certs.broker_keystore),
            "ssl.key.password": KEY_PASSWORD,
            "ssl.truststore.location": str(certs.ca),
            "offsets.topic.num.partitions": 1,
            "offsets.topic.replication.factor": 2,
        }
        broker = SecuredBroker(cluster_brokers.directory / f"broker-{node_id}", node_id, connect,
                               config=config, port=internal)  # fmt: skip
        cluster_brokers.brokers.append(broker)
        brokers.append(broker)
    start_together(brokers)
    registration = zk_view.json("/brokers/ids/2")
    assert registration["listener_security_protocol_map"] == {
        "INTERNAL": "SSL", "CLIENT": "SASL_SSL"
    }  # fmt: skip
    assert registration["endpoints"] == [
        f"INTERNAL://127.0.0.1:{brokers[1].port}",
        f"CLIENT://127.0.0.1:{client_ports[2]}",
    ]

    plain = {
        "bootstrap.servers": f"127.0.0.1:{client_ports[2]}",
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(certs.ca),
        "sasl.mechanism": "PLAIN",
        "sasl.username": CLIENT_USER,
        "sasl.password": CLIENT_PASSWORD,
    }
    internal_client = {
        "bootstrap.servers": brokers[0].bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs.ca),
        "ssl.certificate.location": str(certs.client_cert),
        "ssl.key.location": str(certs.client_key),
    }
    admin = AdminClient(plain)

    def listed(settings: dict[str, Any]) -> dict[int, int] | None:
        brokers_seen = AdminClient(settings).list_topics(timeout=5).brokers
        ports = {node_id: b.port for node_id, b in brokers_seen.items()}
        return ports if len(ports) == 2 else None

    client_view = poll(lambda: listed(plain), 30, "both brokers listed on CLIENT")
    assert client_view == client_ports
    internal_view = poll(lambda: listed(internal_client), 10, "both listed on INTERNAL")
    assert internal_view == {b.node_id: b.port for b in brokers}

    topic = "two-listeners"
    admin.create_topics([NewTopic(topic, 1, 2)])[topic].result(30)

    def in_sync() -> bool:
        partitions = admin.list_topics(topic, timeout=5).topics[topic].partitions
        return bool(partitions) and all(len(p.isrs) == 2 for p in partitions.values())

    poll(in_sync, 30, f"{topic}: two in-sync replicas")
    values = [f"m-{i}".encode() for i in range(100)]
    every_client_port = ",".join(f"127.0.0.1:{port}" for port in client_ports.values())
    produce({**plain, "bootstrap.servers": every_client_port}, topic, values)
    assert read_all(plain, topic, len(values)) == values
