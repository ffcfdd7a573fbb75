"""DescribeConfigs (32): every topic config with its value and source, and broker configs."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.context import BrokerContext, make
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module
from weir.storage import LogConfig

TOPIC = 2
BROKER = 4
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5


def config_entries(broker: BrokerContext, overrides: dict[str, str]) -> list[tuple[str, str, int]]:
    """(name, value, source) of every topic config, overrides resolved over broker defaults."""
    effective = LogConfig.from_properties(overrides, broker.config.log_defaults).to_properties()
    defaults = LogConfig().to_properties()
    entries = []
    for name, value in sorted(effective.items()):
        if name in overrides:
            source = SOURCE_DYNAMIC_TOPIC
        elif value != defaults[name]:
            source = SOURCE_STATIC_BROKER
        else:
            source = SOURCE_DEFAULT
        entries.append((name, value, source))
    return entries


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.DESCRIBE_CONFIGS, request.api_version)
    results = [_describe(m, broker, r) for r in request.body.resources]
    return make(
        m.DescribeConfigsResponse, throttle_time=datetime.timedelta(0), results=tuple(results)
    )


def _describe(m: Any, broker: BrokerContext, resource: Any) -> Any:
    entries: list[tuple[str, str, int]]
    if resource.resource_type == TOPIC:
        info = broker.metadata.topic(resource.resource_name)
        if info is None:
            return _result(m, resource, ErrorCode.unknown_topic_or_partition, "no such topic", [])
        entries = config_entries(broker, info.configs)
    elif resource.resource_type == BROKER:
        if resource.resource_name not in ("", str(broker.config.node_id)):
            return _result(m, resource, ErrorCode.invalid_request, "unknown broker", [])
        entries = [(n, v, SOURCE_STATIC_BROKER) for n, v in broker.config.broker_configs().items()]
    else:
        return _result(m, resource, ErrorCode.invalid_request, "unsupported resource type", [])
    keys = resource.configuration_keys
    if keys is not None:
        entries = [e for e in entries if e[0] in keys]
    return _result(m, resource, ErrorCode.none, None, entries)


def _result(
    m: Any,
    resource: Any,
    error: ErrorCode,
    message: str | None,
    entries: list[tuple[str, str, int]],
) -> Any:
    configs = tuple(
        make(m.DescribeConfigsResourceResult, name=name, value=value, read_only=False,
             config_source=source, is_default=source == SOURCE_DEFAULT, is_sensitive=False,
             synonyms=(), config_type=0, documentation=None)
        for name, value, source in entries
    )  # fmt: skip
    return make(
        m.DescribeConfigsResult,
        error_code=error,
        error_message=message,
        resource_type=resource.resource_type,
        resource_name=resource.resource_name,
        configs=configs,
    )
