"""ApiVersions (18): the advertised version table, nothing more."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.context import BrokerContext, make
from weir.protocol.apis import ADVERTISED, ApiKey
from weir.protocol.codec import Request, response_module


def build(version: int, error: ErrorCode = ErrorCode.none) -> Any:
    m = response_module(ApiKey.API_VERSIONS, version)
    keys = tuple(
        make(m.ApiVersion, api_key=key, min_version=low, max_version=high)
        for key, (low, high) in sorted(ADVERTISED.items())
    )
    return make(
        m.ApiVersionsResponse,
        error_code=error,
        api_keys=keys,
        throttle_time=datetime.timedelta(0),
        supported_features=(),
        finalized_features_epoch=-1,
        finalized_features=(),
        zk_migration_ready=False,
    )


async def handle(broker: BrokerContext, request: Request) -> Any:
    return build(request.api_version)
