"""AlterConfigs (33): replace a topic's config overrides, or a broker's dynamic configs (its own
or, with an empty resource name, the cluster default), with the given set."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.acl import AclOperation
from weir.broker.authz.checks import config_error
from weir.broker.context import BrokerContext, make
from weir.broker.handlers.describe_configs import BROKER, TOPIC
from weir.broker.topics import TopicError
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.ALTER_CONFIGS, request.api_version)
    body = request.body
    responses = []
    for resource in body.resources:
        configs = {c.name: c.value for c in resource.configs if c.value is not None}
        error, message = await apply(broker, resource, _replace_with(configs), body.validate_only)
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
        m.AlterConfigsResponse, throttle_time=datetime.timedelta(0), responses=tuple(responses)
    )


def _replace_with(configs: dict[str, str]) -> Any:
    return lambda _current: configs


async def apply(
    broker: BrokerContext, resource: Any, change: Any, validate_only: bool
) -> tuple[ErrorCode, str | None]:
    """Set a topic's overrides, or a broker's dynamic configs, to `change(current ones)`;
    (error, message)."""
    if refused := config_error(broker, AclOperation.ALTER_CONFIGS, resource):
        return refused, None
    if resource.resource_type == BROKER and broker.dynamic_config is not None:
        return await broker.dynamic_config.alter(resource.resource_name, change, validate_only)
    if resource.resource_type != TOPIC:
        return ErrorCode.invalid_request, (
            "AlterConfigs is only supported for topics and brokers, but resource type is "
            f"{resource.resource_type}"
        )
    info = broker.metadata.topic(resource.resource_name)
    if info is None:
        return ErrorCode.unknown_topic_or_partition, f"no topic {resource.resource_name!r}"
    try:
        broker.topics.set_configs(info.name, change(dict(info.configs)), validate_only)
    except TopicError as exc:
        return exc.error, exc.message
    except ValueError as exc:
        return ErrorCode.invalid_config, str(exc)
    return ErrorCode.none, None
