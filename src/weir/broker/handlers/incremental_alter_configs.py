"""IncrementalAlterConfigs (44): SET, DELETE, APPEND and SUBTRACT on topic config overrides and
on dynamic broker configs."""

from __future__ import annotations

import datetime
from typing import Any

from weir.broker.context import BrokerContext, make
from weir.broker.handlers.alter_configs import apply
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.INCREMENTAL_ALTER_CONFIGS, request.api_version)
    body = request.body
    responses = []
    for resource in body.resources:
        change = _changes(resource.configs)
        error, message = await apply(broker, resource, change, body.validate_only)
        responses.append(
            make(
                m.AlterConfigsResourceResponse,
                error_code=error,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    return make(
        m.IncrementalAlterConfigsResponse,
        throttle_time=datetime.timedelta(0),
        responses=tuple(responses),
    )


def _changes(operations: Any) -> Any:
    def change(current: dict[str, str]) -> dict[str, str]:
        for op in operations:
            items = [v for v in current.get(op.name, "").split(",") if v]
            if op.config_operation == SET:
                current[op.name] = op.value or ""
            elif op.config_operation == DELETE:
                current.pop(op.name, None)
            elif op.config_operation == APPEND:
                current[op.name] = ",".join([*items, *(op.value or "").split(",")])
            elif op.config_operation == SUBTRACT:
                removed = set((op.value or "").split(","))
                current[op.name] = ",".join(v for v in items if v not in removed)
            else:
                raise ValueError(f"unknown config operation {op.config_operation}")
        return current

    return change
