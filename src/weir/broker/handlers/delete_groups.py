"""DeleteGroups (42): remove empty groups and their committed offsets."""

from __future__ import annotations

import datetime
from typing import Any

from weir.broker.authz.acl import AclOperation
from weir.broker.authz.checks import group_error
from weir.broker.context import BrokerContext, make
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.DELETE_GROUPS, request.api_version)
    results = tuple(
        make(m.DeletableGroupResult, group_id=group_id,
             error_code=group_error(broker, AclOperation.DELETE, group_id)
             or broker.groups.delete_group(group_id))
        for group_id in request.body.groups_names
    )  # fmt: skip
    return make(m.DeleteGroupsResponse, throttle_time=datetime.timedelta(0), results=results)
