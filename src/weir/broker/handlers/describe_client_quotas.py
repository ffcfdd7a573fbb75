"""DescribeClientQuotas (48): the client quota entities a filter matches, with their quotas.
DescribeConfigs on the cluster is required, as Kafka requires it; a filter Kafka refuses gets its
error (INVALID_REQUEST, or UNSUPPORTED_VERSION for an entity type it does not know) and no
entries."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import f64

from weir.broker.authz.acl import AclOperation
from weir.broker.authz.checks import cluster_error
from weir.broker.context import BrokerContext, make
from weir.broker.quota_admin import (
    FilterComponent,
    QuotaRequestError,
    describe,
    entity_components,
)
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.DESCRIBE_CLIENT_QUOTAS, request.api_version)
    if refused := cluster_error(broker, AclOperation.DESCRIBE_CONFIGS):
        return _response(m, refused, None, None)
    if broker.quotas is None:
        return _response(m, ErrorCode.unknown_server_error, "client quotas are not kept", None)
    components = [FilterComponent(c.entity_type, c.match_type, c.match)
                  for c in request.body.components]  # fmt: skip
    try:
        found = describe(broker.quotas.store.configs(), components, request.body.strict)
    except QuotaRequestError as exc:
        return _response(m, exc.error, exc.message, None)
    entries = tuple(
        make(m.EntryData,
             entity=tuple(make(m.EntityData, entity_type=t, entity_name=n)
                          for t, n in entity_components(entity)),
             values=tuple(make(m.ValueData, key=k, value=f64(v))
                          for k, v in sorted(values.items())))
        for entity, values in found
    )  # fmt: skip
    return _response(m, ErrorCode.none, None, entries)


def _response(m: Any, error: ErrorCode, message: str | None, entries: Any) -> Any:
    return make(m.DescribeClientQuotasResponse, throttle_time=datetime.timedelta(0),
                error_code=error, error_message=message, entries=entries)  # fmt: skip
