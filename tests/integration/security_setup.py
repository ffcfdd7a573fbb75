"""Shared by the security tests: certificates made with the `openssl` command (a CA, a
broker certificate for 127.0.0.1/localhost, a client certificate, and one from a CA the broker
does not trust), and the settings of a broker with a listener for each security protocol.

A test module makes its `certs` and `broker` fixtures with `secure_fixtures`."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess, require_tool

CLIENT_SUBJECT = "/C=GB/O=Weir Test/OU=eng/CN=alice"
#: the principal Kafka's DEFAULT mapping gives CLIENT_SUBJECT's certificate
CLIENT_PRINCIPAL = "User:CN=alice,OU=eng,O=Weir Test,C=GB"
PLAIN_USERS = {"alice": "alice-secret", "bob": "bob-secret"}
SCRAM_USER, SCRAM_PASSWORD = "carol", "carol-secret"
KEY_PASSWORD = "key-secret"


@dataclass(frozen=True, slots=True)
class Certificates:
    ca: Path
    broker_keystore: Path  # key (encrypted with KEY_PASSWORD) and certificate chain
    broker_cert: Path
    broker_key: Path
    client_cert: Path
    client_key: Path
    rogue_cert: Path  # signed by a CA the broker does not trust
    rogue_key: Path


def make_certificates(directory: Path) -> Certificates:
    openssl = require_tool("openssl")
    directory.mkdir(parents=True, exist_ok=True)

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True, cwd=directory)

    for ca in ("ca", "rogue-ca"):
        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout",
            f"{ca}.key", "-out", f"{ca}.pem", "-subj", f"/CN=Weir Test {ca}")  # fmt: skip
    extensions = directory / "broker.ext"
    extensions.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _signed(run, "broker", "/CN=localhost", "ca", extensions.name)
    _signed(run, "client", CLIENT_SUBJECT, "ca", None)
    _signed(run, "rogue", "/CN=mallory", "rogue-ca", None)
    run("pkey", "-in", "broker.key", "-aes256", "-passout", f"pass:{KEY_PASSWORD}",
        "-out", "broker-encrypted.key")  # fmt: skip
    keystore = directory / "broker-keystore.pem"
    keystore.write_text(
        (directory / "broker-encrypted.key").read_text()
        + (directory / "broker.pem").read_text()
        + (directory / "ca.pem").read_text()
    )
    return Certificates(
        ca=directory / "ca.pem",
        broker_keystore=keystore,
        broker_cert=directory / "broker.pem",
        broker_key=directory / "broker.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
        rogue_cert=directory / "rogue.pem",
        rogue_key=directory / "rogue.key",
    )


def _signed(
    run: Callable[..., None], name: str, subject: str, ca: str, extensions: str | None
) -> None:
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
        "-subj", subject)  # fmt: skip
    more = ["-extfile", extensions] if extensions else []
    run("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", *more)  # fmt: skip


def secure_broker_config(certs: Certificates, **extra: object) -> dict[str, object]:
    """One listener per security protocol, plus MTLS (SSL, client certificates required)."""
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0,"
        "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,"
        "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "ssl.keystore.location": str(certs.broker_keystore),
        "ssl.key.password": KEY_PASSWORD,
        "ssl.truststore.location": str(certs.ca),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.enabled.mechanisms": "PLAIN",
        "connections.authentication.timeout.ms": 2000,
        "num.partitions": 1,
        **{f"sasl.plain.users.{user}": password for user, password in PLAIN_USERS.items()},
        **extra,
    }


def start_scram_broker(
    directory: Path, certs: Certificates, iterations: int | None = None, **extra: object
) -> BrokerProcess:
    """A broker of `secure_broker_config` (with `extra` settings) with the SCRAM-SHA-512 user
    SCRAM_USER, made as an operator would make it, over the PLAINTEXT listener (`iterations`:
    weir's default)."""
    broker = BrokerProcess(directory, config=secure_broker_config(certs, **extra))
    broker.start()
    more = [] if iterations is None else ["--iterations", str(iterations)]
    made = subprocess.run(
        [sys.executable, "-m", "weir.cli.main", "user", "create", SCRAM_USER,
         "--mechanism", "SCRAM-SHA-512", *more, "--password", SCRAM_PASSWORD,
         "--bootstrap-server", f"127.0.0.1:{broker.listeners['PLAINTEXT']}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if made.returncode != 0:
        broker.stop()
        raise RuntimeError(made.stderr)
    return broker


def secure_fixtures(
    name: str, *, scram_user: bool = True, scram_iterations: int | None = None
) -> tuple[Any, Any]:
    """A test module's `certs` and `broker` fixtures, both module-scoped: certificates, and a
    broker of `secure_broker_config` in a directory named after `name`, with the SCRAM user of
    `start_scram_broker` when `scram_user`. Use as `certs, broker = secure_fixtures(...)`."""

    @pytest.fixture(scope="module")
    def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
        return make_certificates(tmp_path_factory.mktemp("certs"))

    @pytest.fixture(scope="module")
    def broker(
        certs: Certificates, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[BrokerProcess]:
        directory = tmp_path_factory.mktemp(name) / "broker"
        if scram_user:
            process = start_scram_broker(directory, certs, scram_iterations)
        else:
            process = BrokerProcess(directory, config=secure_broker_config(certs))
            process.start()
        yield process
        process.stop()

    return certs, broker


def sasl_ssl_settings(certs: Certificates, password: str = SCRAM_PASSWORD) -> dict[str, str]:
    """librdkafka's settings for SCRAM_USER on the SASL_SSL listener."""
    return {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(certs.ca),
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": SCRAM_USER,
        "sasl.password": password,
    }
