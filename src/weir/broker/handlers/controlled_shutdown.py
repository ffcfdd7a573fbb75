"""ControlledShutdown (7): a broker about to stop asks the controller to move its leaderships
to other in-sync replicas first, so that clients see only a retriable NOT_LEADER. Another broker
than the controller answers NOT_CONTROLLER."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.context import BrokerContext, make
from weir.protocol.apis import InterBrokerApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(InterBrokerApiKey.CONTROLLED_SHUTDOWN, request.api_version)
    body = request.body
    outcome = None
    if broker.cluster is not None:
        future = broker.cluster.controller.controlled_shutdown(
            body.broker_id, getattr(body, "broker_epoch", -1)
        )
        outcome = await asyncio.wrap_future(future)
    if outcome is None:
        return make(m.ControlledShutdownResponse, error_code=ErrorCode.not_controller,
                    remaining_partitions=())  # fmt: skip
    error, remaining = outcome
    return make(
        m.ControlledShutdownResponse,
        error_code=ErrorCode(error),
        remaining_partitions=tuple(
            make(m.RemainingPartition, topic_name=topic, partition_index=index)
            for topic, index in remaining
        ),
    )
