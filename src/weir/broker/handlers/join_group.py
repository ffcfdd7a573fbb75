"""JoinGroup (11): join (or rejoin) a group; answered once the rebalance completes."""

from __future__ import annotations

import datetime
from typing import Any

from weir.broker.context import BrokerContext, make
from weir.broker.group.coordinator import JoinRequest
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module

MEMBER_ID_REQUIRED_FROM = 4


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.JOIN_GROUP, request.api_version)
    body = request.body
    session = int(body.session_timeout.total_seconds() * 1000)
    rebalance_td = getattr(body, "rebalance_timeout", None)
    rebalance = session if rebalance_td is None else int(rebalance_td.total_seconds() * 1000)
    result = await broker.groups.join(JoinRequest(
        group_id=body.group_id, member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        client_id=request.client_id or "", client_host="/127.0.0.1",
        session_timeout_ms=session,
        rebalance_timeout_ms=rebalance,
        protocol_type=body.protocol_type,
        protocols=[(p.name, p.metadata) for p in body.protocols],
        require_known_member_id=request.api_version >= MEMBER_ID_REQUIRED_FROM,
    ))  # fmt: skip
    members = tuple(make(m.JoinGroupResponseMember, member_id=mid, group_instance_id=instance,
                         metadata=meta) for mid, instance, meta in result.members)  # fmt: skip
    return make(
        m.JoinGroupResponse,
        throttle_time=datetime.timedelta(0),
        error_code=result.error,
        generation_id=result.generation,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol or "",
        leader=result.leader,
        skip_assignment=False,
        member_id=result.member_id,
        members=members,
    )
