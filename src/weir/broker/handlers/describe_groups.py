"""DescribeGroups (15): state, protocol and members (with metadata and assignment)."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.acl import AclOperation
from weir.broker.authz.checks import group_error
from weir.broker.context import BrokerContext, make
from weir.broker.group.state import DEAD, STABLE
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module

NO_OPERATIONS = -(2**31)


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.DESCRIBE_GROUPS, request.api_version)
    described = []
    for group_id in request.body.groups:
        group = broker.groups.groups.get(group_id)
        refused = group_error(broker, AclOperation.DESCRIBE, group_id)
        if group is None or refused:
            described.append(
                make(
                    m.DescribedGroup,
                    error_code=refused,
                    group_id=group_id,
                    group_state=DEAD.value,
                    protocol_type="",
                    protocol_data="",
                    members=(),
                    authorized_operations=NO_OPERATIONS,
                )
            )
            continue
        protocol = group.protocol or ""
        members = tuple(
            make(m.DescribedGroupMember, member_id=member.member_id,
                 group_instance_id=member.group_instance_id, client_id=member.client_id,
                 client_host=member.client_host, member_metadata=member.metadata_for(protocol),
                 member_assignment=member.assignment if group.is_(STABLE) else b"")
            for member in group.members.values()
        )  # fmt: skip
        described.append(
            make(
                m.DescribedGroup,
                error_code=ErrorCode.none,
                group_id=group_id,
                group_state=group.state.value,
                protocol_type=group.protocol_type or "",
                protocol_data=protocol if group.is_(STABLE) else "",
                members=members,
                authorized_operations=NO_OPERATIONS,
            )
        )
    return make(
        m.DescribeGroupsResponse, throttle_time=datetime.timedelta(0), groups=tuple(described)
    )
