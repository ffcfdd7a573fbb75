"""CreateAcls (30): store ACL bindings; needs Alter on the cluster. Each creation gets its own
result: INVALID_REQUEST for a binding that cannot be stored (an unknown type, a pattern other
than LITERAL or PREFIXED, an operation the resource type does not have, a principal that is not
TYPE:NAME, in cluster mode a name ZooKeeper cannot hold), UNKNOWN_SERVER_ERROR when the store
failed, SECURITY_DISABLED without an authorizer, as Kafka answers."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.acl import (
    CLUSTER_NAME,
    AclError,
    AclOperation,
    ResourceType,
    binding_of,
)
from weir.broker.context import BrokerContext, make
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module

NO_AUTHORIZER = "No Authorizer is configured on the broker"


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.CREATE_ACLS, request.api_version)
    creations = request.body.creations
    authorizer = broker.authorizer
    if authorizer is None:
        return _response(m, [(ErrorCode.security_disabled, NO_AUTHORIZER)] * len(creations))
    if not broker.authorized(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        refused = (ErrorCode.cluster_authorization_failed, None)
        return _response(m, [refused] * len(creations))
    bindings = [
        binding_of(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal,
                   c.host, c.operation, c.permission_type)
        for c in creations
    ]  # fmt: skip
    loop = asyncio.get_running_loop()
    outcomes = await loop.run_in_executor(None, authorizer.create, bindings)
    return _response(m, [_result(why) for why in outcomes])


def _result(why: Exception | None) -> tuple[ErrorCode, str | None]:
    if why is None:
        return ErrorCode.none, None
    if isinstance(why, AclError):
        return ErrorCode.invalid_request, str(why)
    return ErrorCode.unknown_server_error, str(why)


def _response(m: Any, results: list[tuple[ErrorCode, str | None]]) -> Any:
    return make(
        m.CreateAclsResponse,
        throttle_time=datetime.timedelta(0),
        results=tuple(
            make(m.AclCreationResult, error_code=error, error_message=message)
            for error, message in results
        ),
    )
