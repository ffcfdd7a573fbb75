"""DescribeAcls (29): the ACL bindings a filter matches, grouped by resource pattern. Describe
on the cluster is checked before the handler (`authz.gate`); without an authorizer the answer
is SECURITY_DISABLED, an invalid filter INVALID_REQUEST."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.acl import AclError, ResourcePattern, filter_of
from weir.broker.authz.authorizer import order
from weir.broker.context import BrokerContext, make
from weir.broker.handlers.create_acls import NO_AUTHORIZER
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.DESCRIBE_ACLS, request.api_version)
    authorizer = broker.authorizer
    if authorizer is None:
        return _response(m, ErrorCode.security_disabled, NO_AUTHORIZER, ())
    try:
        acl_filter = filter_of(request.body).validate()
    except AclError as exc:
        return _response(m, ErrorCode.invalid_request, str(exc), ())
    by_pattern: dict[ResourcePattern, list[Any]] = {}
    for binding in order(authorizer.describe(acl_filter)):
        entry = binding.entry
        by_pattern.setdefault(binding.pattern, []).append(make(
            m.AclDescription, principal=entry.principal, host=entry.host,
            operation=entry.operation, permission_type=entry.permission,
        ))  # fmt: skip
    resources = tuple(
        make(m.DescribeAclsResource, resource_type=p.resource_type, resource_name=p.name,
             pattern_type=p.pattern_type, acls=tuple(acls))
        for p, acls in by_pattern.items()
    )  # fmt: skip
    return _response(m, ErrorCode.none, None, resources)


def _response(m: Any, error: ErrorCode, message: str | None, resources: Any) -> Any:
    return make(
        m.DescribeAclsResponse,
        throttle_time=datetime.timedelta(0),
        error_code=error,
        error_message=message,
        resources=resources,
    )
