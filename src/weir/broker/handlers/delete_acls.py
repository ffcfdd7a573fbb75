"""DeleteAcls (31): remove every ACL binding each filter matches and name them per filter;
needs Alter on the cluster. An invalid filter gets INVALID_REQUEST (the others still apply),
UNKNOWN_SERVER_ERROR for a filter whose resources the store failed to change, SECURITY_DISABLED
without an authorizer, as Kafka answers."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclError,
    AclOperation,
    ResourceType,
    filter_of,
)
from weir.broker.context import BrokerContext, make
from weir.broker.handlers.create_acls import NO_AUTHORIZER
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.DELETE_ACLS, request.api_version)
    count = len(request.body.filters)
    authorizer = broker.authorizer
    if authorizer is None:
        return _response(m, [_failed(m, ErrorCode.security_disabled, NO_AUTHORIZER)] * count)
    if not broker.authorized(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return _response(m, [_failed(m, ErrorCode.cluster_authorization_failed, None)] * count)
    valid: list[AclBindingFilter] = []
    results: list[Any] = []
    for raw in request.body.filters:
        try:
            valid.append(filter_of(raw).validate())
            results.append(None)
        except AclError as exc:
            results.append(_failed(m, ErrorCode.invalid_request, str(exc)))
    loop = asyncio.get_running_loop()
    matched = iter(await loop.run_in_executor(None, authorizer.delete, valid))
    return _response(m, [
        result if result is not None else _deleted(m, next(matched)) for result in results
    ])  # fmt: skip


def _deleted(m: Any, found: list[AclBinding] | Exception) -> Any:
    if isinstance(found, Exception):
        return _failed(m, ErrorCode.unknown_server_error, str(found))
    return make(
        m.DeleteAclsFilterResult,
        error_code=ErrorCode.none,
        error_message=None,
        matching_acls=tuple(_matching(m, b) for b in found),
    )


def _matching(m: Any, b: AclBinding) -> Any:
    pattern, entry = b.pattern, b.entry
    return make(
        m.DeleteAclsMatchingAcl, error_code=ErrorCode.none, error_message=None,
        resource_type=pattern.resource_type, resource_name=pattern.name,
        pattern_type=pattern.pattern_type, principal=entry.principal, host=entry.host,
        operation=entry.operation, permission_type=entry.permission,
    )  # fmt: skip


def _failed(m: Any, error: ErrorCode, message: str | None) -> Any:
    return make(m.DeleteAclsFilterResult, error_code=error, error_message=message, matching_acls=())


def _response(m: Any, results: list[Any]) -> Any:
    return make(
        m.DeleteAclsResponse, throttle_time=datetime.timedelta(0), filter_results=tuple(results)
    )
