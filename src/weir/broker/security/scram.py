"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses them: the keys a
credential keeps, and the server side of one exchange.

A credential is (salt, iterations, StoredKey, ServerKey); the password and the salted password
are never kept. The exchange is four messages:

    client-first  n,,n=<user>,r=<client nonce>
    server-first  r=<client nonce><server nonce>,s=<salt>,i=<iterations>
    client-final  c=<channel binding>,r=<nonce>,p=<proof>
    server-final  v=<server signature>

`ScramServer` is sans-IO: `evaluate(message)` answers each client message or raises
`SaslAuthenticationError`. An unknown user gets a made-up salt and fails only at the proof, so
the exchange does not tell which users exist.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from weir.broker.security.errors import SaslAuthenticationError

#: iteration counts AlterUserScramCredentials accepts, as Kafka does
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
#: gs2 header of a client without channel binding and without an authorization id
GS2_NO_BINDING = "n,,"


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    name: str
    #: the number AlterUserScramCredentials and DescribeUserScramCredentials use
    type_id: int
    hash_name: str

    def digest(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        """Hi(password, salt, i) of RFC 5802: PBKDF2 with this mechanism's HMAC."""
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode(), salt, iterations)

    def credential(self, salted_password: bytes, salt: bytes, iterations: int) -> ScramCredential:
        client_key = self.hmac(salted_password, b"Client Key")
        return ScramCredential(
            salt=salt,
            stored_key=self.digest(client_key),
            server_key=self.hmac(salted_password, b"Server Key"),
            iterations=iterations,
        )


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", 1, "sha256")
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", 2, "sha512")
MECHANISMS = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
MECHANISMS_BY_ID = {m.type_id: m for m in MECHANISMS.values()}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_text(self) -> str:
        """Kafka's text form, as it keeps it in ZooKeeper under /config/users/<user>."""
        return (
            f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},"
            f"server_key={_b64(self.server_key)},iterations={self.iterations}"
        )

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        fields = dict(item.split("=", 1) for item in text.split(",") if "=" in item)
        try:
            return cls(
                salt=base64.b64decode(fields["salt"], validate=True),
                stored_key=base64.b64decode(fields["stored_key"], validate=True),
                server_key=base64.b64decode(fields["server_key"], validate=True),
                iterations=int(fields["iterations"]),
            )
        except (KeyError, ValueError) as exc:
            raise ValueError(f"not a SCRAM credential: {exc}") from None


CredentialLookup = Callable[[str, ScramMechanism], ScramCredential | None]


class ScramState(enum.Enum):
    RECEIVE_CLIENT_FIRST = "receive-client-first"
    RECEIVE_CLIENT_FINAL = "receive-client-final"
    COMPLETE = "complete"
    FAILED = "failed"


class ScramServer:
    """The server side of one SCRAM exchange. `authorization_id` is the authenticated user
    once `complete`."""

    def __init__(
        self,
        mechanism: ScramMechanism,
        lookup: CredentialLookup,
        *,
        server_nonce: str | None = None,
        unknown_user_secret: bytes | None = None,
    ) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._server_nonce = server_nonce or secrets.token_urlsafe(24)
        self._secret = unknown_user_secret or secrets.token_bytes(32)
        self.state = ScramState.RECEIVE_CLIENT_FIRST
        self.authorization_id: str | None = None
        self._user = ""
        self._credential: ScramCredential | None = None
        self._known_user = False
        self._client_first_bare = ""
        self._server_first = ""
        self._gs2_header = ""
        self._nonce = ""

    @property
    def complete(self) -> bool:
        return self.state is ScramState.COMPLETE

    def evaluate(self, message: bytes) -> bytes:
        try:
            if self.state is ScramState.RECEIVE_CLIENT_FIRST:
                return self._client_first(_text(message))
            if self.state is ScramState.RECEIVE_CLIENT_FINAL:
                return self._client_final(_text(message))
        except SaslAuthenticationError:
            self.state = ScramState.FAILED
            raise
        raise SaslAuthenticationError(f"{self.mechanism.name}: no message expected now")

    def _client_first(self, message: str) -> bytes:
        gs2_flag, authzid, bare = _split_gs2(message)
        if gs2_flag not in ("n", "y"):  # "y": the client could bind, but thinks we cannot
            raise SaslAuthenticationError(
                f"{self.mechanism.name}: channel binding is not supported"
            )
        attributes = _attributes(bare)
        if "m" in attributes:
            raise SaslAuthenticationError(f"{self.mechanism.name}: mandatory extension refused")
        user = _saslname(attributes.get("n", ""))
        client_nonce = attributes.get("r", "")
        if not user or not client_nonce:
            raise SaslAuthenticationError(
                f"{self.mechanism.name}: the first message needs a user name and a nonce"
            )
        if authzid and authzid != user:
            raise SaslAuthenticationError(
                f"{self.mechanism.name}: authorization id {authzid!r} is not the user name"
            )
        credential = self._lookup(user, self.mechanism)
        self._known_user = credential is not None
        self._credential = credential or self._unknown_user_credential(user)
        self._user = user
        self._gs2_header = message[: len(message) - len(bare)]
        self._client_first_bare = bare
        self._nonce = client_nonce + self._server_nonce
        self._server_first = (
            f"r={self._nonce},s={_b64(self._credential.salt)},i={self._credential.iterations}"
        )
        self.state = ScramState.RECEIVE_CLIENT_FINAL
        return self._server_first.encode()

    def _client_final(self, message: str) -> bytes:
        assert self._credential is not None
        without_proof, sep, proof_text = message.rpartition(",p=")
        if not sep:
            raise SaslAuthenticationError(f"{self.mechanism.name}: the final message has no proof")
        attributes = _attributes(without_proof)
        if attributes.get("c") != _b64(self._gs2_header.encode()):
            raise SaslAuthenticationError(f"{self.mechanism.name}: wrong channel binding")
        # librdkafka sends its own nonce again in front of the exchange's; Kafka accepts any
        # nonce that ends with the exchange's, and so must we. The proof covers what was sent.
        nonce, expected = attributes.get("r", "").encode(), self._nonce.encode()
        if len(nonce) < len(expected) or not hmac.compare_digest(nonce[-len(expected) :], expected):
            raise SaslAuthenticationError(
                f"{self.mechanism.name}: the final message does not carry the nonce of this "
                "exchange"
            )
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        credential = self._credential
        client_signature = self.mechanism.hmac(credential.stored_key, auth_message)
        proof = _unb64(proof_text)
        if len(proof) != len(client_signature) or not self._known_user:
            raise _invalid_credentials(self.mechanism)
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(self.mechanism.digest(client_key), credential.stored_key):
            raise _invalid_credentials(self.mechanism)
        self.authorization_id = self._user
        self.state = ScramState.COMPLETE
        server_signature = self.mechanism.hmac(credential.server_key, auth_message)
        return f"v={_b64(server_signature)}".encode()

    def _unknown_user_credential(self, user: str) -> ScramCredential:
        """A credential no password matches, the same for the same user every time."""
        salt = self.mechanism.hmac(self._secret, user.encode())[:16]
        return ScramCredential(
            salt=salt,
            stored_key=secrets.token_bytes(len(salt)),
            server_key=secrets.token_bytes(len(salt)),
            iterations=MIN_ITERATIONS,
        )


def _invalid_credentials(mechanism: ScramMechanism) -> SaslAuthenticationError:
    return SaslAuthenticationError(
        f"Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism.name}"
    )


def _split_gs2(message: str) -> tuple[str, str, str]:
    """(channel-binding flag, authorization id, client-first-message-bare)."""
    parts = message.split(",", 2)
    if len(parts) != 3:
        raise SaslAuthenticationError("SCRAM: malformed first message")
    flag, authzid, bare = parts
    if authzid and not authzid.startswith("a="):
        raise SaslAuthenticationError("SCRAM: malformed authorization id")
    return flag.split("=", 1)[0], _saslname(authzid[2:]), bare


def _attributes(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or len(key) != 1:
            raise SaslAuthenticationError(f"SCRAM: malformed attribute {item!r}")
        out.setdefault(key, value)
    return out


def _saslname(text: str) -> str:
    """A user name as SCRAM writes it: `=2C` for ',' and `=3D` for '='."""
    if "=" in text.replace("=2C", "").replace("=3D", ""):
        raise SaslAuthenticationError("SCRAM: malformed user name")
    return text.replace("=2C", ",").replace("=3D", "=")


def _text(message: bytes) -> str:
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslAuthenticationError("SCRAM: message is not UTF-8") from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise SaslAuthenticationError("SCRAM: proof is not base64") from None
