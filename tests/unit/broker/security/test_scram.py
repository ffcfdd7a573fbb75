"""SCRAM on bytes alone: RFC 7677's published SCRAM-SHA-256 exchange, and the ways an
exchange must fail."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from weir.broker.security.errors import SaslAuthenticationError
from weir.broker.security.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    ScramState,
)

# RFC 7677 section 3: user "user", password "pencil"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def credential(mechanism: ScramMechanism, password: str, salt: bytes) -> ScramCredential:
    return mechanism.credential(mechanism.salted_password(password, salt, 4096), salt, 4096)


def rfc_server(password: str = "pencil") -> ScramServer:
    stored = credential(SCRAM_SHA_256, password, RFC_SALT)
    return ScramServer(
        SCRAM_SHA_256,
        lambda user, mechanism: stored if user == "user" else None,
        server_nonce=RFC_SERVER_NONCE,
    )


def test_rfc7677_exchange_gives_the_published_messages() -> None:
    server = rfc_server()
    assert server.evaluate(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert server.evaluate(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete
    assert server.authorization_id == "user"


def test_wrong_password_fails_at_the_proof() -> None:
    server = rfc_server(password="not-pencil")
    server.evaluate(RFC_CLIENT_FIRST)
    with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
        server.evaluate(RFC_CLIENT_FINAL)
    assert server.state is ScramState.FAILED
    assert server.authorization_id is None


def test_a_nonce_other_than_the_exchanges_is_refused() -> None:
    server = rfc_server()
    server.evaluate(RFC_CLIENT_FIRST)
    forged = RFC_CLIENT_FINAL.replace(b"hNlF$k0", b"hNlF$k1")
    with pytest.raises(SaslAuthenticationError, match="nonce"):
        server.evaluate(forged)


def test_librdkafkas_repeated_client_nonce_is_accepted_as_kafka_accepts_it() -> None:
    """librdkafka puts its client nonce in front of the whole nonce again; Kafka takes any
    nonce that ends with the exchange's, and the proof is computed over what was sent."""
    salt = b"0123456789abcdef"
    stored = credential(SCRAM_SHA_256, "pencil", salt)
    server = ScramServer(SCRAM_SHA_256, lambda user, mechanism: stored)
    server_first = server.evaluate(b"n,,n=user,r=cn").decode()
    nonce = server_first.split(",")[0][2:]
    assert client_final(server, "pencil", salt, "n=user,r=cn", server_first, "cn" + nonce)


def client_final(
    server: ScramServer, password: str, salt: bytes, first_bare: str, server_first: str, nonce: str
) -> bytes:
    """Send the client-final message a SHA-256 client computes; the server's answer."""
    without_proof = f"c=biws,r={nonce}"
    auth = f"{first_bare},{server_first},{without_proof}".encode()
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, 4096)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth, "sha256").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return server.evaluate(f"{without_proof},p={base64.b64encode(proof).decode()}".encode())


def test_a_nonce_not_ending_with_the_exchanges_is_refused_even_with_a_right_proof() -> None:
    salt = b"0123456789abcdef"
    stored = credential(SCRAM_SHA_256, "pencil", salt)
    server = ScramServer(SCRAM_SHA_256, lambda user, mechanism: stored)
    server_first = server.evaluate(b"n,,n=user,r=cn").decode()
    nonce = server_first.split(",")[0][2:]
    with pytest.raises(SaslAuthenticationError, match="nonce"):
        client_final(server, "pencil", salt, "n=user,r=cn", server_first, nonce + "x")


def test_a_changed_proof_is_refused() -> None:
    server = rfc_server()
    server.evaluate(RFC_CLIENT_FIRST)
    proof = bytearray(base64.b64decode(RFC_CLIENT_FINAL.rsplit(b"p=", 1)[1]))
    proof[0] ^= 1
    forged = RFC_CLIENT_FINAL.rsplit(b"p=", 1)[0] + b"p=" + base64.b64encode(bytes(proof))
    with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
        server.evaluate(forged)


def test_unknown_user_gets_a_salt_and_fails_only_at_the_proof() -> None:
    server = rfc_server()
    first = server.evaluate(b"n,,n=nobody,r=abc")
    assert first.startswith(b"r=abc") and b",s=" in first and b",i=4096" in first
    with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
        server.evaluate(b"c=biws,r=abc" + RFC_SERVER_NONCE.encode() + b",p=" + b"A" * 44)


def test_channel_binding_requests_and_bad_bindings_are_refused() -> None:
    with pytest.raises(SaslAuthenticationError, match="channel binding"):
        rfc_server().evaluate(b"p=tls-unique,,n=user,r=abc")
    server = rfc_server()
    server.evaluate(RFC_CLIENT_FIRST)
    with pytest.raises(SaslAuthenticationError, match="channel binding"):
        server.evaluate(RFC_CLIENT_FINAL.replace(b"c=biws", b"c=eSws"))


@pytest.mark.parametrize(
    "message",
    [b"", b"n,,", b"n,,n=user", b"n,,r=abc", b"x", b"n,,n=us=er,r=abc", b"\xff\xfe"],
)
def test_malformed_first_messages_fail_cleanly(message: bytes) -> None:
    with pytest.raises(SaslAuthenticationError):
        rfc_server().evaluate(message)


def test_a_message_after_the_exchange_ended_is_refused() -> None:
    server = rfc_server()
    server.evaluate(RFC_CLIENT_FIRST)
    server.evaluate(RFC_CLIENT_FINAL)
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(RFC_CLIENT_FINAL)


def test_sha512_exchange_computed_as_a_client_would() -> None:
    salt = b"0123456789abcdef"
    stored = credential(SCRAM_SHA_512, "s3cret", salt)
    server = ScramServer(SCRAM_SHA_512, lambda user, mechanism: stored)
    client_first_bare = "n=alice,r=clientnonce"
    server_first = server.evaluate(b"n,," + client_first_bare.encode()).decode()
    nonce = server_first.split(",")[0][2:]
    without_proof = f"c=biws,r={nonce}"
    auth = f"{client_first_bare},{server_first},{without_proof}".encode()
    salted = hashlib.pbkdf2_hmac("sha512", b"s3cret", salt, 4096)
    client_key = hmac.new(salted, b"Client Key", "sha512").digest()
    signature = hmac.new(hashlib.sha512(client_key).digest(), auth, "sha512").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    final = server.evaluate(f"{without_proof},p={base64.b64encode(proof).decode()}".encode())
    server_key = hmac.new(salted, b"Server Key", "sha512").digest()
    expected = hmac.new(server_key, auth, "sha512").digest()
    assert final == b"v=" + base64.b64encode(expected)
    assert server.authorization_id == "alice"


def test_credential_text_round_trips_in_kafkas_form() -> None:
    stored = credential(SCRAM_SHA_256, "pencil", RFC_SALT)
    text = stored.to_text()
    assert text.startswith("salt=W22ZaJ0SNY7soEsUEjb6gQ==,stored_key=")
    assert text.endswith(",iterations=4096")
    assert ScramCredential.from_text(text) == stored
    with pytest.raises(ValueError):
        ScramCredential.from_text("salt=xx")
