"""The SASL side of a connection on a SASL_PLAINTEXT or SASL_SSL listener: which requests it
may send while authenticating, and the mechanism that checks its credentials.

    HANDSHAKE ──SaslHandshake v1──► AUTHENTICATE ──SaslAuthenticate (last step)──► AUTHENTICATED
        │                               │  ▲ (more steps)
        │                               └──┘
        └──SaslHandshake v0──► AUTHENTICATE_RAW (tokens as bare size-prefixed frames)
    any failure ──► FAILED (the connection is closed once the answer is sent)

Before AUTHENTICATED only ApiVersions (while waiting for the handshake), SaslHandshake and
SaslAuthenticate are served; anything else closes the connection, as Kafka does.
Sans-IO: the server moves the bytes; this decides.
"""

from __future__ import annotations

import enum
import hmac
from collections.abc import Callable, Mapping
from typing import Protocol

from weir.broker.security.errors import SaslAuthenticationError
from weir.broker.security.scram import MECHANISMS, CredentialLookup, ScramServer
from weir.protocol.apis import ApiKey

PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = (PLAIN, *MECHANISMS)


class SaslState(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    AUTHENTICATE_RAW = "authenticate-raw"
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


class SaslEvent(enum.Enum):
    HANDSHAKE = "handshake"
    HANDSHAKE_V0 = "handshake-v0"
    STEP = "step"
    COMPLETE = "complete"
    FAIL = "fail"


_TRANSITIONS: Mapping[tuple[SaslState, SaslEvent], SaslState] = {
    (SaslState.HANDSHAKE, SaslEvent.HANDSHAKE): SaslState.AUTHENTICATE,
    (SaslState.HANDSHAKE, SaslEvent.HANDSHAKE_V0): SaslState.AUTHENTICATE_RAW,
    (SaslState.AUTHENTICATE, SaslEvent.STEP): SaslState.AUTHENTICATE,
    (SaslState.AUTHENTICATE, SaslEvent.COMPLETE): SaslState.AUTHENTICATED,
    (SaslState.AUTHENTICATE_RAW, SaslEvent.STEP): SaslState.AUTHENTICATE_RAW,
    (SaslState.AUTHENTICATE_RAW, SaslEvent.COMPLETE): SaslState.AUTHENTICATED,
    **{(state, SaslEvent.FAIL): SaslState.FAILED for state in SaslState},
}

#: requests served in each state before authentication
_ALLOWED: Mapping[SaslState, frozenset[int]] = {
    SaslState.HANDSHAKE: frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE}),
    SaslState.AUTHENTICATE: frozenset({ApiKey.SASL_AUTHENTICATE}),
    SaslState.AUTHENTICATE_RAW: frozenset(),
    SaslState.FAILED: frozenset(),
}


class SaslMechanismServer(Protocol):
    authorization_id: str | None

    @property
    def complete(self) -> bool: ...

    def evaluate(self, message: bytes) -> bytes: ...


class PlainServer:
    """SASL/PLAIN (RFC 4616): one message, `[authzid] NUL user NUL password`."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.authorization_id: str | None = None

    @property
    def complete(self) -> bool:
        return self.authorization_id is not None

    def evaluate(self, message: bytes) -> bytes:
        parts = message.split(b"\0")
        if len(parts) != 3:
            raise SaslAuthenticationError("PLAIN: expected [authzid] NUL user NUL password")
        try:
            authzid, user, password = (part.decode("utf-8") for part in parts)
        except UnicodeDecodeError:
            raise SaslAuthenticationError("PLAIN: message is not UTF-8") from None
        if not user or not password:
            raise SaslAuthenticationError("PLAIN: user name and password must not be empty")
        if authzid and authzid != user:
            raise SaslAuthenticationError(
                "PLAIN: an authorization id other than the user name is not allowed"
            )
        expected = self._users.get(user)
        # compared even for unknown users, so the time taken does not tell which exist
        matches = hmac.compare_digest(password.encode(), (expected or "\0" + password).encode())
        if expected is None or not matches:
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        self.authorization_id = user
        return b""


class SaslServerAuthenticator:
    """One connection's SASL state: the mechanisms it may choose from, the chosen one, and
    where the exchange stands."""

    def __init__(
        self,
        enabled_mechanisms: tuple[str, ...],
        plain_users: Callable[[], Mapping[str, str]],
        scram_credentials: CredentialLookup,
    ) -> None:
        self.enabled_mechanisms = enabled_mechanisms
        self._plain_users = plain_users
        self._scram_credentials = scram_credentials
        self.state = SaslState.HANDSHAKE
        self.mechanism: SaslMechanismServer | None = None

    @property
    def authenticated(self) -> bool:
        return self.state is SaslState.AUTHENTICATED

    def allows(self, api_key: int) -> bool:
        """Whether a request of this API may be served now (once authenticated: any)."""
        if self.state is SaslState.AUTHENTICATED:
            return True
        return api_key in _ALLOWED[self.state]

    def handshake(self, mechanism: str, version: int) -> bool:
        """Choose the mechanism; False if it is not enabled here (the client may try another
        on a new connection, as Kafka's clients do)."""
        if mechanism not in self.enabled_mechanisms:
            self._apply(SaslEvent.FAIL)
            return False
        if mechanism == PLAIN:
            self.mechanism = PlainServer(self._plain_users())
        else:
            self.mechanism = ScramServer(MECHANISMS[mechanism], self._scram_credentials)
        self._apply(SaslEvent.HANDSHAKE_V0 if version == 0 else SaslEvent.HANDSHAKE)
        return True

    def authenticate(self, token: bytes) -> bytes:
        """One step of the exchange: the server's answer. SaslAuthenticationError if it fails."""
        if self.mechanism is None or self.state not in (
            SaslState.AUTHENTICATE,
            SaslState.AUTHENTICATE_RAW,
        ):
            self._apply(SaslEvent.FAIL)
            raise SaslAuthenticationError(f"no authentication step expected in {self.state}")
        try:
            answer = self.mechanism.evaluate(token)
        except SaslAuthenticationError:
            self._apply(SaslEvent.FAIL)
            raise
        self._apply(SaslEvent.COMPLETE if self.mechanism.complete else SaslEvent.STEP)
        return answer

    @property
    def user(self) -> str | None:
        return self.mechanism.authorization_id if self.authenticated and self.mechanism else None

    def _apply(self, event: SaslEvent) -> None:
        self.state = _TRANSITIONS[(self.state, event)]
