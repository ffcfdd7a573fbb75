"""The client side of SASL, for this broker's own connections to other brokers: PLAIN and
SCRAM-SHA-256/512 as Kafka's clients speak them, and the requests that carry them
(SaslHandshake v1, then SaslAuthenticate v2 until the mechanism is done).

Sans-IO: `sasl_requests(client)` is a generator that yields (api key, version, body) and is
sent each response; the connection moves the bytes. A refusal raises SaslAuthenticationError
with the other broker's message.
"""

from __future__ import annotations

import base64
import hmac
import secrets
from collections.abc import Generator
from typing import Any, Protocol

from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from weir.broker.security.errors import SaslAuthenticationError
from weir.broker.security.scram import GS2_NO_BINDING, MIN_ITERATIONS, ScramMechanism
from weir.protocol.apis import ApiKey

SASL_HANDSHAKE_VERSION = 1
SASL_AUTHENTICATE_VERSION = 2

#: one request of the exchange: (api key, version, body)
SaslRequest = tuple[int, int, Any]


class SaslMechanismClient(Protocol):
    name: str

    def first(self) -> bytes: ...

    def evaluate(self, challenge: bytes) -> bytes | None:
        """The next token, or None when the exchange is complete."""
        ...


class PlainClient:
    """SASL/PLAIN (RFC 4616): one message, `NUL user NUL password`."""

    name = "PLAIN"

    def __init__(self, user: str, password: str) -> None:
        self._user, self._password = user, password

    def first(self) -> bytes:
        return f"\0{self._user}\0{self._password}".encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        return None


class ScramClient:
    """The client side of one SCRAM exchange (RFC 5802); checks the server's signature."""

    def __init__(
        self, mechanism: ScramMechanism, user: str, password: str, *, nonce: str | None = None
    ) -> None:
        self.mechanism = mechanism
        self.name = mechanism.name
        self._user, self._password = user, password
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._client_first_bare = f"n={_saslname(user)},r={self._nonce}"
        self._server_signature: bytes | None = None

    def first(self) -> bytes:
        return (GS2_NO_BINDING + self._client_first_bare).encode()

    def evaluate(self, challenge: bytes) -> bytes | None:
        if self._server_signature is None:
            return self._client_final(challenge.decode("utf-8", "replace"))
        self._check_server_final(challenge.decode("utf-8", "replace"))
        return None

    def _client_final(self, server_first: str) -> bytes:
        attributes = _attributes(server_first)
        nonce = attributes.get("r", "")
        if not nonce.startswith(self._nonce) or len(nonce) <= len(self._nonce):
            raise SaslAuthenticationError(f"{self.name}: the server's nonce is not ours extended")
        try:
            salt = base64.b64decode(attributes["s"], validate=True)
            iterations = int(attributes["i"])
        except (KeyError, ValueError):
            raise SaslAuthenticationError(f"{self.name}: malformed server-first message") from None
        if iterations < MIN_ITERATIONS:
            raise SaslAuthenticationError(f"{self.name}: {iterations} iterations are too few")
        mechanism = self.mechanism
        salted = mechanism.salted_password(self._password, salt, iterations)
        client_key = mechanism.hmac(salted, b"Client Key")
        without_proof = f"c={_b64(GS2_NO_BINDING.encode())},r={nonce}"
        auth_message = f"{self._client_first_bare},{server_first},{without_proof}".encode()
        signature = mechanism.hmac(mechanism.digest(client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = mechanism.hmac(salted, b"Server Key")
        self._server_signature = mechanism.hmac(server_key, auth_message)
        return f"{without_proof},p={_b64(proof)}".encode()

    def _check_server_final(self, server_final: str) -> None:
        attributes = _attributes(server_final)
        if "e" in attributes:
            raise SaslAuthenticationError(f"{self.name}: the server says {attributes['e']}")
        assert self._server_signature is not None
        expected = _b64(self._server_signature).encode()
        if not hmac.compare_digest(attributes.get("v", "").encode(), expected):
            raise SaslAuthenticationError(f"{self.name}: the server's signature is wrong")


def sasl_requests(client: SaslMechanismClient) -> Generator[SaslRequest, Any, None]:
    """The requests of one exchange; send each response back in."""
    response = yield (
        ApiKey.SASL_HANDSHAKE,
        SASL_HANDSHAKE_VERSION,
        SaslHandshakeRequest(mechanism=client.name),
    )
    if response.error_code:
        raise SaslAuthenticationError(
            f"the broker does not offer {client.name} (it offers {', '.join(response.mechanisms)})"
        )
    token: bytes | None = client.first()
    while token is not None:
        response = yield (
            ApiKey.SASL_AUTHENTICATE,
            SASL_AUTHENTICATE_VERSION,
            SaslAuthenticateRequest(auth_bytes=token),
        )
        if response.error_code:
            raise SaslAuthenticationError(response.error_message or "authentication failed")
        token = client.evaluate(response.auth_bytes)


def _attributes(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep:
            out.setdefault(key, value)
    return out


def _saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
