"""Real clients (kcat, confluent-kafka, kafka-python, aiokafka) against a broker with a
listener per security protocol: SSL without and with client certificates, SASL_PLAINTEXT with
PLAIN, SASL_SSL with SCRAM-SHA-512 for a user made by `weir user create`. Each good setting
produces and consumes; each bad one fails with an authentication error, quickly."""

from __future__ import annotations

import asyncio
import gc
import logging
import ssl
import subprocess
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError
from aiokafka.helpers import create_ssl_context
from broker_process import BrokerProcess, require_tool
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from security_setup import (
    CLIENT_PRINCIPAL,
    PLAIN_USERS,
    SCRAM_PASSWORD,
    SCRAM_USER,
    Certificates,
    secure_fixtures,
)

from weir.broker.security.listener_security import ListenerSecurity

with warnings.catch_warnings():
    # kafka-python reads its protocol schemas with importlib.resources.read_text, deprecated
    warnings.filterwarnings("ignore", "(read|open)_text is deprecated", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import KafkaTimeoutError

TIMEOUT = 30
#: how long a refused client may take to report it (its first error, not its retries)
REFUSAL_WITHIN_S = 12
MESSAGES = [f"message {i}".encode() for i in range(5)]


@dataclass(frozen=True, slots=True)
class Security:
    """One way in: the listener, and what the client presents."""

    listener: str
    protocol: str
    ca: bool = True
    client_cert: bool = False
    mechanism: str | None = None
    user: str | None = None
    password: str | None = None


GOOD = {
    "ssl": Security("SSL", "SSL"),
    "ssl-client-cert": Security("MTLS", "SSL", client_cert=True),
    "sasl-plain": Security("SASL_PLAINTEXT", "SASL_PLAINTEXT", ca=False, mechanism="PLAIN",
                           user="alice", password=PLAIN_USERS["alice"]),
    "sasl-ssl-scram-512": Security("SASL_SSL", "SASL_SSL", mechanism="SCRAM-SHA-512",
                                   user=SCRAM_USER, password=SCRAM_PASSWORD),
}  # fmt: skip
BAD = {
    "sasl-plain-wrong-password": Security("SASL_PLAINTEXT", "SASL_PLAINTEXT", ca=False,
                                          mechanism="PLAIN", user="alice", password="wrong"),
    "sasl-ssl-scram-wrong-password": Security("SASL_SSL", "SASL_SSL", mechanism="SCRAM-SHA-512",
                                              user=SCRAM_USER, password="wrong"),
    "sasl-ssl-scram-unknown-user": Security("SASL_SSL", "SASL_SSL", mechanism="SCRAM-SHA-512",
                                            user="nobody", password=SCRAM_PASSWORD),
}  # fmt: skip


certs, broker = secure_fixtures("secure", scram_iterations=8192)


def address(broker: BrokerProcess, security: Security) -> str:
    return f"127.0.0.1:{broker.listeners[security.listener]}"


def librdkafka_settings(certs: Certificates, security: Security) -> dict[str, str]:
    settings = {"security.protocol": security.protocol}
    if security.ca:
        settings["ssl.ca.location"] = str(certs.ca)
    if security.client_cert:
        settings["ssl.certificate.location"] = str(certs.client_cert)
        settings["ssl.key.location"] = str(certs.client_key)
    if security.mechanism:
        settings.update({"sasl.mechanism": security.mechanism,
                         "sasl.username": str(security.user),
                         "sasl.password": str(security.password)})  # fmt: skip
    return settings


def kafka_python_settings(certs: Certificates, security: Security) -> dict[str, Any]:
    settings: dict[str, Any] = {"security_protocol": security.protocol}
    if security.ca:
        settings["ssl_cafile"] = str(certs.ca)
    if security.client_cert:
        settings.update(ssl_certfile=str(certs.client_cert), ssl_keyfile=str(certs.client_key))
    if security.mechanism:
        settings.update(sasl_mechanism=security.mechanism, sasl_plain_username=security.user,
                        sasl_plain_password=security.password)  # fmt: skip
    return settings


def aiokafka_settings(certs: Certificates, security: Security) -> dict[str, Any]:
    settings = kafka_python_settings(certs, security)
    for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
        settings.pop(key, None)
    if security.ca:
        settings["ssl_context"] = create_ssl_context(
            cafile=str(certs.ca),
            certfile=str(certs.client_cert) if security.client_cert else None,
            keyfile=str(certs.client_key) if security.client_cert else None,
        )
    return settings


# ---- one round trip per client ----------------------------------------------------------------


def round_trip_kcat(broker: BrokerProcess, certs: Certificates, security: Security,
                    topic: str) -> list[bytes]:  # fmt: skip
    kcat = require_tool("kcat")
    flags = [f for k, v in librdkafka_settings(certs, security).items() for f in ("-X", f"{k}={v}")]
    base = [kcat, "-b", address(broker, security), "-q", "-m", "20", *flags]
    produced = subprocess.run([*base, "-P", "-t", topic], input=b"\n".join(MESSAGES) + b"\n",
                              capture_output=True, timeout=TIMEOUT)  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run([*base, "-C", "-t", topic, "-o", "beginning", "-e"],
                              capture_output=True, timeout=TIMEOUT)  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    return consumed.stdout.splitlines()


def round_trip_confluent(broker: BrokerProcess, certs: Certificates, security: Security,
                         topic: str) -> list[bytes]:  # fmt: skip
    settings = {"bootstrap.servers": address(broker, security),
                **librdkafka_settings(certs, security)}  # fmt: skip
    producer = Producer(settings)
    for message in MESSAGES:
        producer.produce(topic, message)
    assert producer.flush(TIMEOUT) == 0
    consumer = Consumer({**settings, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    while len(got) < len(MESSAGES) and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            got.append(message.value() or b"")
    consumer.close()
    return got


def round_trip_kafka_python(broker: BrokerProcess, certs: Certificates, security: Security,
                            topic: str) -> list[bytes]:  # fmt: skip
    settings = kafka_python_settings(certs, security)
    producer = KafkaProducer(bootstrap_servers=address(broker, security), **settings)
    for message in MESSAGES:
        producer.send(topic, message).get(TIMEOUT)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=address(broker, security),
                             auto_offset_reset="earliest", consumer_timeout_ms=10_000,
                             group_id=f"g-{topic}", **settings)  # fmt: skip
    got = [record.value for record in consumer]
    consumer.close()
    return got


def round_trip_aiokafka(broker: BrokerProcess, certs: Certificates, security: Security,
                        topic: str) -> list[bytes]:  # fmt: skip
    async def run() -> list[bytes]:
        settings = aiokafka_settings(certs, security)
        producer = AIOKafkaProducer(bootstrap_servers=address(broker, security), **settings)
        await producer.start()
        try:
            for message in MESSAGES:
                await producer.send_and_wait(topic, message)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=address(broker, security),
                                    auto_offset_reset="earliest", group_id=f"g-{topic}",
                                    **settings)  # fmt: skip
        await consumer.start()
        got: list[bytes] = []
        try:
            while len(got) < len(MESSAGES):
                batches = await consumer.getmany(timeout_ms=1000)
                got += [r.value for records in batches.values() for r in records]
        finally:
            await consumer.stop()
        return got

    result: list[bytes] = asyncio.run(asyncio.wait_for(run(), TIMEOUT))
    return result


ROUND_TRIPS: dict[str, Callable[[BrokerProcess, Certificates, Security, str], list[bytes]]] = {
    "kcat": round_trip_kcat,
    "confluent-kafka": round_trip_confluent,
    "kafka-python": round_trip_kafka_python,
    "aiokafka": round_trip_aiokafka,
}


@pytest.mark.parametrize("way", sorted(GOOD))
@pytest.mark.parametrize("client", sorted(ROUND_TRIPS))
def test_good_settings_produce_and_consume(
    broker: BrokerProcess, certs: Certificates, client: str, way: str
) -> None:
    topic = f"{client}-{way}"
    assert ROUND_TRIPS[client](broker, certs, GOOD[way], topic) == MESSAGES


# ---- refusals -------------------------------------------------------------------------------


def refusal_kcat(broker: BrokerProcess, certs: Certificates, security: Security) -> str:
    kcat = require_tool("kcat")
    flags = [f for k, v in librdkafka_settings(certs, security).items() for f in ("-X", f"{k}={v}")]
    done = subprocess.run([kcat, "-b", address(broker, security), "-L", "-m", "5", *flags],
                          capture_output=True, text=True, timeout=TIMEOUT)  # fmt: skip
    assert done.returncode != 0
    return done.stderr


def refusal_confluent(broker: BrokerProcess, certs: Certificates, security: Security) -> str:
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": address(broker, security),
                         **librdkafka_settings(certs, security),
                         "error_cb": errors.append})  # fmt: skip
    deadline = time.monotonic() + REFUSAL_WITHIN_S
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    with pytest.raises(KafkaException):
        producer.list_topics(timeout=1)
    return " ".join(f"{e.name()} {e.str()}" for e in errors)


def refusal_kafka_python(
    broker: BrokerProcess, certs: Certificates, security: Security, caplog: pytest.LogCaptureFixture
) -> str:
    with caplog.at_level(logging.WARNING, logger="kafka"), pytest.raises(KafkaTimeoutError):
        KafkaProducer(bootstrap_servers=address(broker, security), bootstrap_timeout_ms=5000,
                      **kafka_python_settings(certs, security))  # fmt: skip
    return caplog.text


def refusal_aiokafka(
    broker: BrokerProcess, certs: Certificates, security: Security, caplog: pytest.LogCaptureFixture
) -> str:
    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=address(broker, security),
                                    **aiokafka_settings(certs, security))  # fmt: skip
        try:
            await producer.start()
        finally:
            await producer.stop()

    with caplog.at_level(logging.ERROR, logger="aiokafka"), pytest.raises(KafkaConnectionError):
        asyncio.run(asyncio.wait_for(run(), TIMEOUT))
    return caplog.text


@pytest.fixture
def leaked_sockets_collected(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """kafka-python leaks the sockets of refused connections (aiokafka its TLS transport);
    their log records keep them alive. Drop those and finalize the sockets while the test's
    warning filter still applies."""
    yield
    caplog.get_records("call").clear()
    gc.collect()


@pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning")
@pytest.mark.filterwarnings("ignore:unclosed transport:ResourceWarning")  # aiokafka's, SASL_SSL
@pytest.mark.usefixtures("leaked_sockets_collected")
@pytest.mark.parametrize("way", sorted(BAD))
@pytest.mark.parametrize("client", ["kcat", "confluent-kafka", "kafka-python", "aiokafka"])
def test_bad_credentials_fail_with_an_authentication_error(
    broker: BrokerProcess, certs: Certificates, client: str, way: str,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    security = BAD[way]
    started = time.monotonic()
    if client == "kcat":
        reported = refusal_kcat(broker, certs, security)
    elif client == "confluent-kafka":
        reported = refusal_confluent(broker, certs, security)
    elif client == "kafka-python":
        reported = refusal_kafka_python(broker, certs, security, caplog)
    else:
        reported = refusal_aiokafka(broker, certs, security, caplog)
    assert time.monotonic() - started < REFUSAL_WITHIN_S
    assert "authentication" in reported.lower(), reported


@pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning")
@pytest.mark.usefixtures("leaked_sockets_collected")
@pytest.mark.parametrize("client", ["kcat", "kafka-python"])
def test_no_client_certificate_where_one_is_required_is_refused(
    broker: BrokerProcess, certs: Certificates, client: str, caplog: pytest.LogCaptureFixture
) -> None:
    security = Security("MTLS", "SSL")
    if client == "kcat":
        reported = refusal_kcat(broker, certs, security)
    else:
        reported = refusal_kafka_python(broker, certs, security, caplog)
    assert "ssl" in reported.lower() or "handshake" in reported.lower(), reported


def test_a_certificate_from_an_untrusted_ca_is_refused(
    broker: BrokerProcess, certs: Certificates
) -> None:
    kcat = require_tool("kcat")
    done = subprocess.run(
        [kcat, "-b", f"127.0.0.1:{broker.listeners['MTLS']}", "-L", "-m", "5",
         "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={certs.ca}",
         "-X", f"ssl.certificate.location={certs.rogue_cert}",
         "-X", f"ssl.key.location={certs.rogue_key}"],
        capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert done.returncode != 0
    assert "ssl" in done.stderr.lower() or "handshake" in done.stderr.lower(), done.stderr


def test_metadata_answers_with_the_address_of_the_listener_connected_to(
    broker: BrokerProcess, certs: Certificates
) -> None:
    """Each listener's clients are told that listener's address (here: its port), as Kafka
    answers with the advertised listener of the same name."""
    for way in ("ssl", "ssl-client-cert", "sasl-plain", "sasl-ssl-scram-512"):
        security = GOOD[way]
        producer = Producer({"bootstrap.servers": address(broker, security),
                             **librdkafka_settings(certs, security)})  # fmt: skip
        brokers = producer.list_topics(timeout=TIMEOUT).brokers
        assert [(b.host, b.port) for b in brokers.values()] == [
            ("127.0.0.1", broker.listeners[security.listener])
        ]


def test_a_client_certificate_gives_kafkas_default_principal(certs: Certificates) -> None:
    """The subject of the certificate, most specific attribute first (RFC 2253), as ssl reads a
    verified peer's certificate."""
    decoded = ssl._ssl._test_decode_cert(str(certs.client_cert))  # type: ignore[attr-defined]
    principal = ListenerSecurity.certificate_principal(decoded)
    assert str(principal) == CLIENT_PRINCIPAL
    assert ListenerSecurity.certificate_principal(None) is None
