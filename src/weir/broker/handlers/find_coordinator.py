"""FindCoordinator (10): this broker coordinates every group (and would every transaction)."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.context import BrokerContext, make
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module

GROUP, TRANSACTION = 0, 1


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.FIND_COORDINATOR, request.api_version)
    body = request.body
    host, port = broker.config.advertised
    node = broker.config.node_id
    key_type = getattr(body, "key_type", GROUP)
    error = ErrorCode.none if key_type == GROUP else ErrorCode.coordinator_not_available
    message = None if error is ErrorCode.none else "transactions are not supported"
    if hasattr(body, "coordinator_keys"):  # v4+: several keys at once
        coordinators = tuple(
            make(m.Coordinator, key=key, node_id=node if not message else -1, host=host, port=port,
                 error_code=error, error_message=message)
            for key in body.coordinator_keys
        )  # fmt: skip
        return make(
            m.FindCoordinatorResponse,
            throttle_time=datetime.timedelta(0),
            coordinators=coordinators,
        )
    return make(
        m.FindCoordinatorResponse,
        throttle_time=datetime.timedelta(0),
        error_code=error,
        error_message=message,
        node_id=node if not message else -1,
        host=host,
        port=port,
    )
