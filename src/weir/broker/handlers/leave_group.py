"""LeaveGroup (13): one member (v0-2) or a batch of members (v3+) leave."""

from __future__ import annotations

import datetime
from typing import Any

from weir.broker.context import BrokerContext, make
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.LEAVE_GROUP, request.api_version)
    body = request.body
    if hasattr(body, "members"):
        leaving = [(p.member_id, p.group_instance_id) for p in body.members]
    else:
        leaving = [(body.member_id, None)]
    error, errors = broker.groups.leave(body.group_id, leaving)
    if not hasattr(body, "members"):
        return make(
            m.LeaveGroupResponse,
            throttle_time=datetime.timedelta(0),
            error_code=errors[0] if errors else error,
        )
    members = tuple(
        make(m.MemberResponse, member_id=mid, group_instance_id=instance, error_code=e)
        for (mid, instance), e in zip(leaving, errors, strict=True)
    )
    return make(
        m.LeaveGroupResponse, throttle_time=datetime.timedelta(0), error_code=error, members=members
    )
