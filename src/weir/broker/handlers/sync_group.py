"""SyncGroup (14): the leader hands in the assignment; every member receives its share."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.context import BrokerContext, make
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.SYNC_GROUP, request.api_version)
    body = request.body
    group = broker.groups.groups.get(body.group_id)
    requested_type = getattr(body, "protocol_type", None)
    requested_name = getattr(body, "protocol_name", None)
    if group is not None and (
        (requested_type is not None and requested_type != group.protocol_type)
        or (requested_name is not None and requested_name != group.protocol)
    ):
        return make(
            m.SyncGroupResponse,
            throttle_time=datetime.timedelta(0),
            error_code=ErrorCode.inconsistent_group_protocol,
            protocol_type=None,
            protocol_name=None,
            assignment=b"",
        )
    assignments = {a.member_id: a.assignment for a in body.assignments}
    result = await broker.groups.sync(
        body.group_id,
        body.generation_id,
        body.member_id,
        getattr(body, "group_instance_id", None),
        assignments,
    )
    return make(
        m.SyncGroupResponse,
        throttle_time=datetime.timedelta(0),
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol,
        assignment=result.assignment,
    )
