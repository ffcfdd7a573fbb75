"""SaslHandshake (17): the client names its SASL mechanism. v0 means the tokens that follow
come as bare frames; v1, inside SaslAuthenticate requests. A mechanism the listener does not
offer gets UNSUPPORTED_SASL_MECHANISM with the ones it does, then the connection is closed."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.context import BrokerContext, make
from weir.broker.security.sasl import SaslState
from weir.broker.security.session import current_session
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.SASL_HANDSHAKE, request.api_version)
    session = current_session()
    if session is None or session.sasl is None:
        return make(m.SaslHandshakeResponse, error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    offered = session.sasl.enabled_mechanisms
    if session.sasl.state is not SaslState.HANDSHAKE:
        error = ErrorCode.illegal_sasl_state
    elif session.handshake(request.body.mechanism, request.api_version):
        error = ErrorCode.none
    else:
        error = ErrorCode.unsupported_sasl_mechanism
    return make(m.SaslHandshakeResponse, error_code=error, mechanisms=offered)
