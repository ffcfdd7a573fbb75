"""ListGroups (16): every group, optionally filtered by state (v4+)."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.checks import listable_groups
from weir.broker.context import BrokerContext, make
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.LIST_GROUPS, request.api_version)
    states = set(getattr(request.body, "states_filter", ()) or ())
    groups = tuple(
        make(m.ListedGroup, group_id=g.group_id, protocol_type=g.protocol_type or "",
             group_state=g.state.value)
        for g in listable_groups(broker, broker.groups.groups.values())
        if not states or g.state.value in states
    )  # fmt: skip
    return make(
        m.ListGroupsResponse,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        groups=groups,
    )
