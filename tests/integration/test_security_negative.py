"""The broker's security against clients that misbehave, in raw Kafka bytes: plaintext on a TLS
port, clients that never authenticate, requests before authentication, SCRAM with a forged
nonce or proof, mechanisms not offered; and the SCRAM credential APIs' refusals."""

from __future__ import annotations

import base64
import hashlib
import hmac
import socket
import ssl
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess
from confluent_kafka import Producer
from kio.schema.alter_user_scram_credentials.v0 import request as alter_scram
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.describe_user_scram_credentials.v0 import request as describe_scram
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v1.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as SaslHandshakeV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.serial import entity_reader
from raw_requests import encode_request, recv_exact
from security_setup import (
    PLAIN_USERS,
    Certificates,
    sasl_ssl_settings,
    secure_fixtures,
    start_scram_broker,
)

from weir.protocol.apis import ApiKey
from weir.protocol.codec import codec_for
from weir.protocol.framing import frame

TIMEOUT = 10
#: the broker's connections.authentication.timeout.ms in these tests (secure_broker_config)
AUTH_TIMEOUT_S = 2.0
SCRAM_USER, SCRAM_PASSWORD = "dora", "dora-secret"
SHA512 = 2  # ScramMechanism id of SCRAM-SHA-512


certs, broker = secure_fixtures("negative", scram_user=False)


class Raw:
    """One connection speaking Kafka with kio's classes, over TCP or TLS."""

    def __init__(self, broker: BrokerProcess, listener: str, certs: Certificates | None = None):
        sock = socket.create_connection(("127.0.0.1", broker.listeners[listener]), TIMEOUT)
        if certs is not None:
            context = ssl.create_default_context(cafile=str(certs.ca))
            sock = context.wrap_socket(sock, server_hostname="127.0.0.1")
        self.sock = sock
        self.correlation_id = 0

    def send(self, api_key: int, version: int, body: Any) -> None:
        self.correlation_id += 1
        self.sock.sendall(encode_request(api_key, version, body, self.correlation_id))

    def call(self, api_key: int, version: int, body: Any) -> Any:
        self.send(api_key, version, body)
        payload = self.frame()
        cls = codec_for(api_key, version).response_type
        header, used = entity_reader(cls.__header_schema__)(payload, 0)  # type: ignore[attr-defined]
        assert header.correlation_id == self.correlation_id
        return entity_reader(cls)(payload, used)[0]

    def frame(self) -> bytes:
        (size,) = struct.unpack(">i", recv_exact(self.sock, 4))
        return recv_exact(self.sock, size)

    def closed_after(self) -> float:
        """Seconds until the broker closes the connection (its data so far is discarded)."""
        started = time.monotonic()
        try:
            while self.sock.recv(4096):
                pass
        except (ConnectionResetError, ssl.SSLError):
            pass
        return time.monotonic() - started

    def close(self) -> None:
        self.sock.close()


def api_versions() -> ApiVersionsRequest:
    return ApiVersionsRequest(client_software_name="raw", client_software_version="1")


def salted(password: str, salt: bytes) -> bytes:
    return hashlib.pbkdf2_hmac("sha512", password.encode(), salt, 4096)


def scram_final(
    first_bare: str, server_first: str, nonce: str, password: str, salt: bytes
) -> bytes:
    without_proof = f"c=biws,r={nonce}"
    auth = f"{first_bare},{server_first},{without_proof}".encode()
    client_key = hmac.new(salted(password, salt), b"Client Key", "sha512").digest()
    signature = hmac.new(hashlib.sha512(client_key).digest(), auth, "sha512").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


@pytest.fixture(scope="module")
def scram_user(broker: BrokerProcess) -> str:
    """Made with a raw AlterUserScramCredentials on the PLAINTEXT listener."""
    salt = b"raw-test-salt-16"
    upsertion = alter_scram.ScramCredentialUpsertion(
        name=SCRAM_USER, mechanism=SHA512, iterations=4096, salt=salt,
        salted_password=salted(SCRAM_PASSWORD, salt),
    )  # fmt: skip
    raw = Raw(broker, "PLAINTEXT")
    request = alter_scram.AlterUserScramCredentialsRequest(deletions=(), upsertions=(upsertion,))
    response = raw.call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, request)
    raw.close()
    assert [(r.user, r.error_code) for r in response.results] == [(SCRAM_USER, ErrorCode.none)]
    return SCRAM_USER


def scram_first(raw: Raw) -> tuple[str, str, str]:
    """Handshake and client-first on a SASL_SSL connection: (first bare, server first, nonce)."""
    handshake = raw.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
    assert handshake.error_code == ErrorCode.none
    first_bare = f"n={SCRAM_USER},r=rawclientnonce"
    answer = raw.call(ApiKey.SASL_AUTHENTICATE, 2,
                      SaslAuthenticateRequest(auth_bytes=f"n,,{first_bare}".encode()))  # fmt: skip
    assert answer.error_code == ErrorCode.none
    server_first = answer.auth_bytes.decode()
    nonce = server_first.split(",")[0][2:]
    assert nonce.startswith("rawclientnonce") and len(nonce) > len("rawclientnonce")
    return first_bare, server_first, nonce


def server_salt(server_first: str) -> bytes:
    return base64.b64decode(server_first.split(",s=")[1].split(",")[0])


# ---- TLS ------------------------------------------------------------------------------------


def test_a_plaintext_client_on_the_tls_port_is_closed_and_others_are_served(
    broker: BrokerProcess, certs: Certificates
) -> None:
    raw = Raw(broker, "SSL")
    raw.send(ApiKey.API_VERSIONS, 3, api_versions())
    assert raw.closed_after() < AUTH_TIMEOUT_S  # refused at once, not timed out
    raw.close()
    for listener, tls in (("SSL", certs), ("PLAINTEXT", None)):
        good = Raw(broker, listener, tls)
        assert good.call(ApiKey.API_VERSIONS, 3, api_versions()).error_code == ErrorCode.none
        good.close()


def test_a_tls_client_that_never_handshakes_is_closed_after_the_timeout(
    broker: BrokerProcess,
) -> None:
    raw = Raw(broker, "SSL")
    assert AUTH_TIMEOUT_S * 0.8 < raw.closed_after() < AUTH_TIMEOUT_S + 5
    raw.close()


# ---- SASL before authentication ----------------------------------------------------------------


def test_a_sasl_client_that_never_authenticates_is_closed_after_the_timeout(
    broker: BrokerProcess,
) -> None:
    raw = Raw(broker, "SASL_PLAINTEXT")
    # ApiVersions is served before authentication; the clock runs from the connect all the same
    assert raw.call(ApiKey.API_VERSIONS, 3, api_versions()).error_code == ErrorCode.none
    assert AUTH_TIMEOUT_S * 0.5 < raw.closed_after() < AUTH_TIMEOUT_S + 5
    raw.close()


def test_a_request_before_authentication_closes_the_connection(broker: BrokerProcess) -> None:
    raw = Raw(broker, "SASL_PLAINTEXT")
    raw.send(ApiKey.METADATA, 1, MetadataRequest(topics=None))
    assert raw.closed_after() < AUTH_TIMEOUT_S * 0.5
    raw.close()


def test_api_versions_between_handshake_and_authenticate_closes_the_connection(
    broker: BrokerProcess,
) -> None:
    raw = Raw(broker, "SASL_PLAINTEXT")
    raw.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    raw.send(ApiKey.API_VERSIONS, 3, api_versions())
    assert raw.closed_after() < AUTH_TIMEOUT_S * 0.5
    raw.close()


def test_a_mechanism_not_offered_is_refused_with_the_ones_that_are(broker: BrokerProcess) -> None:
    raw = Raw(broker, "SASL_PLAINTEXT")
    answer = raw.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
    assert answer.error_code == ErrorCode.unsupported_sasl_mechanism
    assert answer.mechanisms == ("PLAIN",)
    assert raw.closed_after() < AUTH_TIMEOUT_S * 0.5
    raw.close()


def test_plain_authenticates_and_then_everything_is_served(broker: BrokerProcess) -> None:
    raw = Raw(broker, "SASL_PLAINTEXT")
    raw.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    token = f"\0alice\0{PLAIN_USERS['alice']}".encode()
    answer = raw.call(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=token))
    assert (answer.error_code, answer.error_message) == (ErrorCode.none, None)
    metadata = raw.call(ApiKey.METADATA, 1, MetadataRequest(topics=None))
    assert [b.port for b in metadata.brokers] == [broker.listeners["SASL_PLAINTEXT"]]
    again = raw.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    assert again.error_code == ErrorCode.illegal_sasl_state
    raw.close()


def test_plain_wrong_password_is_refused_with_a_message_then_closed(
    broker: BrokerProcess,
) -> None:
    raw = Raw(broker, "SASL_PLAINTEXT")
    raw.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    answer = raw.call(ApiKey.SASL_AUTHENTICATE, 2,
                      SaslAuthenticateRequest(auth_bytes=b"\0alice\0wrong"))  # fmt: skip
    assert answer.error_code == ErrorCode.sasl_authentication_failed
    assert "Invalid username or password" in (answer.error_message or "")
    assert raw.closed_after() < AUTH_TIMEOUT_S * 0.5
    raw.close()


def test_handshake_v0_takes_bare_tokens(broker: BrokerProcess) -> None:
    raw = Raw(broker, "SASL_PLAINTEXT")
    answer = raw.call(ApiKey.SASL_HANDSHAKE, 0, SaslHandshakeV0(mechanism="PLAIN"))
    assert answer.error_code == ErrorCode.none
    raw.sock.sendall(frame(f"\0bob\0{PLAIN_USERS['bob']}".encode()))
    assert raw.frame() == b""  # PLAIN's (empty) answer, size-prefixed
    metadata = raw.call(ApiKey.METADATA, 1, MetadataRequest(topics=None))
    assert metadata.brokers
    raw.close()
    refused = Raw(broker, "SASL_PLAINTEXT")
    refused.call(ApiKey.SASL_HANDSHAKE, 0, SaslHandshakeV0(mechanism="PLAIN"))
    refused.sock.sendall(frame(b"\0bob\0wrong"))
    assert refused.closed_after() < AUTH_TIMEOUT_S * 0.5
    refused.close()


# ---- SCRAM over TLS -------------------------------------------------------------------------


def test_scram_with_the_right_proof_authenticates_and_proves_the_server(
    broker: BrokerProcess, certs: Certificates, scram_user: str
) -> None:
    raw = Raw(broker, "SASL_SSL", certs)
    first_bare, server_first, nonce = scram_first(raw)
    salt = server_salt(server_first)
    final = scram_final(first_bare, server_first, nonce, SCRAM_PASSWORD, salt)
    answer = raw.call(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=final))
    assert answer.error_code == ErrorCode.none
    auth = f"{first_bare},{server_first},{final.decode().rsplit(',p=', 1)[0]}".encode()
    server_key = hmac.new(salted(SCRAM_PASSWORD, salt), b"Server Key", "sha512").digest()
    expected = base64.b64encode(hmac.new(server_key, auth, "sha512").digest())
    assert answer.auth_bytes == b"v=" + expected
    assert raw.call(ApiKey.METADATA, 1, MetadataRequest(topics=None)).brokers
    raw.close()


@pytest.mark.parametrize("forgery", ["nonce", "proof"])
def test_scram_with_a_forged_nonce_or_proof_is_refused_then_closed(
    broker: BrokerProcess, certs: Certificates, scram_user: str, forgery: str
) -> None:
    raw = Raw(broker, "SASL_SSL", certs)
    first_bare, server_first, nonce = scram_first(raw)
    if forgery == "nonce":  # a right proof, for a nonce of another exchange
        nonce = nonce[:-1] + ("A" if nonce[-1] != "A" else "B")
        password = SCRAM_PASSWORD
    else:
        password = "not-the-password"
    final = scram_final(first_bare, server_first, nonce, password, server_salt(server_first))
    answer = raw.call(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=final))
    assert answer.error_code == ErrorCode.sasl_authentication_failed
    assert ("nonce" if forgery == "nonce" else "invalid credentials") in (
        answer.error_message or ""
    )
    assert raw.closed_after() < AUTH_TIMEOUT_S * 0.5
    raw.close()


# ---- the credential APIs ----------------------------------------------------------------------


def test_scram_credential_apis_refuse_as_kafka_does(broker: BrokerProcess, scram_user: str) -> None:
    raw = Raw(broker, "PLAINTEXT")
    described = raw.call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0,
                         describe_scram.DescribeUserScramCredentialsRequest(users=(
                             describe_scram.UserName(name=scram_user),
                             describe_scram.UserName(name="nobody"))))  # fmt: skip
    results = {r.user: r for r in described.results}
    assert results[scram_user].error_code == ErrorCode.none
    assert [(c.mechanism, c.iterations) for c in results[scram_user].credential_infos] == [
        (SHA512, 4096)
    ]
    assert results["nobody"].error_code == ErrorCode.resource_not_found

    def upsertion(name: str, iterations: int = 4096, mechanism: int = SHA512) -> Any:
        return alter_scram.ScramCredentialUpsertion(
            name=name, mechanism=mechanism, iterations=iterations, salt=b"s" * 16,
            salted_password=b"p" * 64,
        )  # fmt: skip

    request = alter_scram.AlterUserScramCredentialsRequest(
        deletions=(alter_scram.ScramCredentialDeletion(name="ghost", mechanism=SHA512),),
        upsertions=(
            upsertion("few", iterations=100),
            upsertion("twice"),
            upsertion("twice"),
            upsertion("odd", mechanism=7),
            upsertion("fine"),
        ),
    )
    altered = raw.call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, request)
    errors = {r.user: r.error_code for r in altered.results}
    assert errors == {
        "ghost": ErrorCode.resource_not_found,
        "few": ErrorCode.unacceptable_credential,
        "twice": ErrorCode.duplicate_resource,
        "odd": ErrorCode.unsupported_sasl_mechanism,
        "fine": ErrorCode.none,
    }
    everyone = raw.call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0,
                        describe_scram.DescribeUserScramCredentialsRequest(users=None))  # fmt: skip
    assert {r.user for r in everyone.results} >= {scram_user, "fine"}
    assert not {"few", "twice", "odd", "ghost"} & {r.user for r in everyone.results}
    raw.close()


def test_an_oversized_frame_before_authentication_names_the_limit_in_force(
    broker: BrokerProcess, certs: Certificates
) -> None:
    raw = Raw(broker, "SASL_SSL", certs)
    raw.sock.sendall(struct.pack(">i", 600 * 1024))
    assert raw.closed_after() < AUTH_TIMEOUT_S  # refused from the size, not at the timeout
    raw.close()
    assert "exceeds sasl.server.max.receive.size=524288" in broker.logs()


def test_unauthenticated_large_frames_do_not_hold_up_an_authenticated_produce(
    certs: Certificates, tmp_path: Path, figure: Callable[..., None]
) -> None:
    """Forty TLS connections announce 500 KiB frames (under sasl.server.max.receive.size) and
    send nothing more: twice the request budget. An authenticated client's 900 KiB produce
    must not wait for them to time out."""
    settings = {"queued.max.request.bytes": 10 * 1024 * 1024,
                "connections.authentication.timeout.ms": 20_000}  # fmt: skip
    secure = start_scram_broker(tmp_path / "broker", certs, **settings)
    attackers: list[Raw] = []
    try:
        for _ in range(40):
            attacker = Raw(secure, "SASL_SSL", certs)
            attacker.sock.sendall(struct.pack(">i", 500 * 1024))
            attackers.append(attacker)
        producer = Producer({**sasl_ssl_settings(certs), "linger.ms": 0,
                             "bootstrap.servers": f"127.0.0.1:{secure.listeners['SASL_SSL']}"})
        producer.produce("large", b"warm-up")  # authenticates and creates the topic
        assert producer.flush(TIMEOUT) == 0
        reports: list[Any] = []
        started = time.monotonic()
        producer.produce("large", b"x" * 900 * 1024, on_delivery=lambda e, _m: reports.append(e))
        assert producer.flush(30) == 0
        elapsed = time.monotonic() - started
        figure("authenticated 900 KiB produce beside 40 unauthenticated 500 KiB frames", elapsed)
        assert reports == [None]
        assert elapsed < 5, f"the produce waited {elapsed:.1f} s for unauthenticated frames"
        assert all(a.sock.fileno() >= 0 for a in attackers)  # they were still connected
    finally:
        for attacker in attackers:
            attacker.close()
        secure.stop()
