"""UpdateMetadata (6): the controller's view of live brokers and partitions, for this broker's
metadata cache."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.context import BrokerContext, make
from weir.protocol.apis import InterBrokerApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(InterBrokerApiKey.UPDATE_METADATA, request.api_version)
    body = request.body
    error = broker.controller_request_error(body)
    if error is ErrorCode.none and broker.cluster is not None:
        broker.cluster.cache.apply(body)
    return make(m.UpdateMetadataResponse, error_code=error)
