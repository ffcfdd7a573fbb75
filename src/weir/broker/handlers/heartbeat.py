"""Heartbeat (12): keep a member alive; learn of a rebalance."""

from __future__ import annotations

import datetime
from typing import Any

from weir.broker.context import BrokerContext, make
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.HEARTBEAT, request.api_version)
    body = request.body
    error = broker.groups.heartbeat(
        body.group_id, body.generation_id, body.member_id, getattr(body, "group_instance_id", None)
    )
    return make(m.HeartbeatResponse, throttle_time=datetime.timedelta(0), error_code=error)
