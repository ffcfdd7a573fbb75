"""What the broker knows about a connection's security: the listener it came in on, who it
is (its principal), and its SASL exchange while one is under way; and whether its client is to
be throttled after the response being served (client quotas, `weir.broker.client_quotas`).

The connection's task binds its `Session` once (`bind`), so code serving one of its requests
reads it with `current_session()`: the SASL handlers drive the exchange through it, Metadata
answers with the addresses of the connection's listener, and an authorizer can check
`session.principal`.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field

from weir.broker.security.errors import SaslAuthenticationError
from weir.broker.security.listeners import Listener
from weir.broker.security.sasl import SaslServerAuthenticator, SaslState

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")


@dataclass(slots=True)
class Session:
    listener: Listener
    client_address: str
    principal: KafkaPrincipal = ANONYMOUS
    #: the SASL exchange of a connection on a SASL listener; None elsewhere
    sasl: SaslServerAuthenticator | None = None
    #: set when the answer being sent must be the connection's last (a failed exchange)
    close_after_response: bool = field(default=False)
    #: when the connection must have authenticated (event-loop time), once it is counted
    deadline: float | None = None
    #: how long (ms) the connection is muted after the response being served is sent: a client
    #: over its quota (KIP-219); `throttle_before_response`: the response waits that long instead
    throttle_ms: int = 0
    throttle_before_response: bool = False

    @property
    def authenticated(self) -> bool:
        return self.sasl is None or self.sasl.authenticated

    @property
    def raw_sasl_tokens(self) -> bool:
        """Whether the next frames are bare SASL tokens (after a SaslHandshake v0)."""
        return self.sasl is not None and self.sasl.state is SaslState.AUTHENTICATE_RAW

    def allows(self, api_key: int) -> bool:
        return self.sasl is None or self.sasl.allows(api_key)

    def handshake(self, mechanism: str, version: int) -> bool:
        """Choose the SASL mechanism; False (and the connection is to be closed) if this
        listener does not offer it."""
        assert self.sasl is not None
        chosen = self.sasl.handshake(mechanism, version)
        self.close_after_response = not chosen
        return chosen

    def authenticate(self, token: bytes) -> bytes:
        """One SASL step: the server's token. On failure (SaslAuthenticationError) the
        connection is to be closed; on success the principal is the authenticated user."""
        assert self.sasl is not None
        try:
            answer = self.sasl.authenticate(token)
        except SaslAuthenticationError:
            self.close_after_response = True
            raise
        if self.sasl.user is not None:
            self.principal = KafkaPrincipal(USER_TYPE, self.sasl.user)
        return answer


_CURRENT: contextvars.ContextVar[Session] = contextvars.ContextVar("weir_session")


def bind(session: Session) -> None:
    """Make `session` the current one for the calling task (a connection's own task)."""
    _CURRENT.set(session)


def current_session() -> Session | None:
    return _CURRENT.get(None)
