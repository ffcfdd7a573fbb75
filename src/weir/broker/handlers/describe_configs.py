"""DescribeConfigs (32): every topic config (Kafka's whole table) and every broker setting, with
value, source, type, synonyms (topic override -> broker setting -> default) and documentation
when asked. Topic configs that are accepted but not in effect on this broker say so in their
documentation."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.acl import AclOperation
from weir.broker.authz.checks import config_error
from weir.broker.config import SCALED_SYNONYMS, BrokerConfig
from weir.broker.context import BrokerContext, make
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module
from weir.storage import LogConfig
from weir.storage.config import TOPIC_CONFIGS, ConfigType, TopicConfigDef

TOPIC = 2
BROKER = 4
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
NOT_IN_EFFECT = " Accepted and validated; not in effect on this broker yet."


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str
    source: int
    type: ConfigType
    doc: str | None
    synonyms: tuple[tuple[str, str, int], ...]
    read_only: bool = False


def config_entries(broker: BrokerContext, overrides: dict[str, str]) -> list[ConfigEntry]:
    """Every topic config, overrides resolved over the broker's defaults over Kafka's."""
    config = broker.config
    effective = LogConfig.from_properties(overrides, config.log_defaults)
    return [_topic_entry(d, config, overrides, effective) for d in TOPIC_CONFIGS]


def _topic_entry(
    definition: TopicConfigDef, config: BrokerConfig, overrides: dict[str, str], effective: Any
) -> ConfigEntry:
    name = definition.name
    value = definition.text(getattr(effective, definition.field_name))
    broker_value = definition.text(getattr(config.log_defaults, definition.field_name))
    synonyms = []
    if name in overrides:
        synonyms.append((name, value, SOURCE_DYNAMIC_TOPIC))
    broker_names = [definition.broker_name] if definition.broker_name else []
    broker_names += [n for n, (topic, _) in SCALED_SYNONYMS.items() if topic == name]
    for broker_name in broker_names:
        if broker_name in config.explicit:
            synonyms.append((broker_name, broker_value, SOURCE_STATIC_BROKER))
            break
    synonyms.append((definition.broker_name or name, definition.default, SOURCE_DEFAULT))
    doc = definition.doc + ("" if definition.in_effect else NOT_IN_EFFECT)
    return ConfigEntry(name, value, synonyms[0][2], definition.type, doc, tuple(synonyms))


def broker_entries(config: BrokerConfig) -> list[ConfigEntry]:
    synonym_of = {d.broker_name: d for d in TOPIC_CONFIGS if d.broker_name}
    entries = []
    for name, value in config.broker_configs().items():
        source = SOURCE_STATIC_BROKER if name in config.explicit else SOURCE_DEFAULT
        definition = synonym_of.get(name)
        kind = definition.type if definition else _type_of(value)
        doc = f"The default for the topic config {definition.name}." if definition else None
        synonyms = ((name, value, source),)
        entries.append(ConfigEntry(name, value, source, kind, doc, synonyms, read_only=True))
    return entries


def _type_of(value: str) -> ConfigType:
    if value in ("true", "false"):
        return ConfigType.BOOLEAN
    if value.lstrip("-").isdigit():
        return ConfigType.INT if -(2**31) <= int(value) < 2**31 else ConfigType.LONG
    return ConfigType.STRING


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.DESCRIBE_CONFIGS, request.api_version)
    body = request.body
    synonyms = bool(getattr(body, "include_synonyms", False))
    documentation = bool(getattr(body, "include_documentation", False))
    results = [_describe(m, broker, r, synonyms, documentation) for r in body.resources]
    return make(
        m.DescribeConfigsResponse, throttle_time=datetime.timedelta(0), results=tuple(results)
    )


def _describe(m: Any, broker: BrokerContext, resource: Any, synonyms: bool, docs: bool) -> Any:
    entries: list[ConfigEntry]
    if refused := config_error(broker, AclOperation.DESCRIBE_CONFIGS, resource):
        return _result(m, resource, refused, None, [])
    if resource.resource_type == TOPIC:
        info = broker.metadata.topic(resource.resource_name)
        if info is None:
            return _result(m, resource, ErrorCode.unknown_topic_or_partition, "no such topic", [])
        entries = config_entries(broker, info.configs)
    elif resource.resource_type == BROKER:
        if resource.resource_name not in ("", str(broker.config.node_id)):
            return _result(m, resource, ErrorCode.invalid_request, "unknown broker", [])
        entries = broker_entries(broker.config)
    else:
        return _result(m, resource, ErrorCode.invalid_request, "unsupported resource type", [])
    keys = resource.configuration_keys
    if keys is not None:
        entries = [e for e in entries if e.name in keys]
    return _result(m, resource, ErrorCode.none, None, entries, synonyms, docs)


def _result(
    m: Any,
    resource: Any,
    error: ErrorCode,
    message: str | None,
    entries: list[ConfigEntry],
    synonyms: bool = False,
    docs: bool = False,
) -> Any:
    configs = tuple(_config(m, e, synonyms, docs) for e in entries)
    return make(
        m.DescribeConfigsResult,
        error_code=error,
        error_message=message,
        resource_type=resource.resource_type,
        resource_name=resource.resource_name,
        configs=configs,
    )


def _config(m: Any, entry: ConfigEntry, synonyms: bool, docs: bool) -> Any:
    listed: tuple[Any, ...] = ()
    if synonyms and hasattr(m, "DescribeConfigsSynonym"):
        listed = tuple(
            make(m.DescribeConfigsSynonym, name=n, value=v, source=s) for n, v, s in entry.synonyms
        )
    return make(
        m.DescribeConfigsResourceResult, name=entry.name, value=entry.value,
        read_only=entry.read_only, config_source=entry.source,
        is_sensitive=False, synonyms=listed,
        config_type=int(entry.type), documentation=entry.doc if docs else None,
    )  # fmt: skip
