"""SaslAuthenticate (36): one step of the SASL exchange chosen by SaslHandshake v1. A failed
step answers SASL_AUTHENTICATION_FAILED with the reason, then the connection is closed.
Sessions do not expire (`connections.max.reauth.ms` is 0: no re-authentication)."""

from __future__ import annotations

import datetime
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.context import BrokerContext, make
from weir.broker.security.errors import SaslAuthenticationError
from weir.broker.security.sasl import SaslState
from weir.broker.security.session import current_session
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module

log = logging.getLogger(__name__)


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.SASL_AUTHENTICATE, request.api_version)
    session = current_session()
    if session is None or session.sasl is None or session.sasl.state is not SaslState.AUTHENTICATE:
        if session is not None:
            session.close_after_response = True
        return _response(m, ErrorCode.illegal_sasl_state, "no SASL authentication expected now")
    try:
        answer = session.authenticate(request.body.auth_bytes)
    except SaslAuthenticationError as exc:
        log.info(
            "failed authentication from %s on %s: %s",
            session.client_address, session.listener.name, exc,
        )  # fmt: skip
        return _response(m, exc.error_code, str(exc))
    if session.sasl.authenticated:
        log.debug("%s authenticated from %s", session.principal, session.client_address)
    return _response(m, ErrorCode.none, None, answer)


def _response(m: Any, error: ErrorCode, message: str | None, answer: bytes = b"") -> Any:
    return make(
        m.SaslAuthenticateResponse,
        error_code=error,
        error_message=message,
        auth_bytes=answer,
        session_lifetime=datetime.timedelta(0),
    )
