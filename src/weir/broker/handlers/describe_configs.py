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
from weir.broker.dynamic_config import (
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_BY_NAME,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    STATIC_BROKER_CONFIG,
    DynamicBrokerConfig,
    is_read_only,
)
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module
from weir.storage import LogConfig
from weir.storage.config import TOPIC_CONFIGS, ConfigType, TopicConfigDef

TOPIC = 2
BROKER = 4
NOT_IN_EFFECT = " Accepted and validated; not in effect on this broker yet."
NOT_AT_ONCE = " A dynamic change is stored at once and in effect from the broker's next start."


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
    return [
        _topic_entry(d, broker.dynamic_config, config, overrides, effective) for d in TOPIC_CONFIGS
    ]


def _topic_entry(
    definition: TopicConfigDef,
    dynamic: DynamicBrokerConfig | None,
    config: BrokerConfig,
    overrides: dict[str, str],
    effective: Any,
) -> ConfigEntry:
    name = definition.name
    value = definition.text(getattr(effective, definition.field_name))
    synonyms = []
    if name in overrides:
        synonyms.append((name, value, DYNAMIC_TOPIC_CONFIG))
    synonyms += _broker_synonyms(definition, dynamic, config)
    synonyms.append((definition.broker_name or name, definition.default, DEFAULT_CONFIG))
    doc = definition.doc + ("" if definition.in_effect else NOT_IN_EFFECT)
    return ConfigEntry(name, value, synonyms[0][2], definition.type, doc, tuple(synonyms))


def _broker_synonyms(
    definition: TopicConfigDef, dynamic: DynamicBrokerConfig | None, config: BrokerConfig
) -> list[tuple[str, str, int]]:
    """The broker settings a topic config falls back to that are set, dynamically or in the
    broker's config (Kafka's default is listed by the caller)."""
    if dynamic is not None and definition.broker_name:
        return [s for s in dynamic.sources(definition.broker_name) if s[2] != DEFAULT_CONFIG]
    broker_value = definition.text(getattr(config.log_defaults, definition.field_name))
    broker_names = [definition.broker_name] if definition.broker_name else []
    broker_names += [n for n, (topic, _) in SCALED_SYNONYMS.items() if topic == definition.name]
    for broker_name in broker_names:
        if broker_name in config.explicit:
            return [(broker_name, broker_value, STATIC_BROKER_CONFIG)]
    return []


def broker_entries(config: BrokerConfig, dynamic: DynamicBrokerConfig | None) -> list[ConfigEntry]:
    """Every broker setting with its effective value, and the dynamic ones nothing else names."""
    values = config.broker_configs()
    if dynamic is not None:
        for name in dynamic.custom_names():
            values[name] = dynamic.sources(name)[0][1]
    return [_broker_entry(name, value, config, dynamic) for name, value in sorted(values.items())]


def default_broker_entries(dynamic: DynamicBrokerConfig | None) -> list[ConfigEntry]:
    """The cluster-wide dynamic defaults (a BROKER resource with an empty name), as Kafka lists
    them: only those set."""
    if dynamic is None:
        return []
    defaults = dynamic.cluster_default()
    return [
        _entry(name, value, DYNAMIC_DEFAULT_BROKER_CONFIG,
               ((name, value, DYNAMIC_DEFAULT_BROKER_CONFIG),))
        for name, value in sorted(defaults.items())
    ]  # fmt: skip


def _broker_entry(
    name: str, value: str, config: BrokerConfig, dynamic: DynamicBrokerConfig | None
) -> ConfigEntry:
    if dynamic is not None:
        synonyms = tuple(dynamic.sources(name)) or ((name, value, DYNAMIC_BROKER_CONFIG),)
    else:
        source = STATIC_BROKER_CONFIG if name in config.explicit else DEFAULT_CONFIG
        synonyms = ((name, value, source),)
    return _entry(name, value, synonyms[0][2], synonyms)


def _entry(
    name: str, value: str, source: int, synonyms: tuple[tuple[str, str, int], ...]
) -> ConfigEntry:
    definition = _SYNONYM_OF.get(name)
    setting = DYNAMIC_BY_NAME.get(name)
    kind = definition.type if definition else setting.type if setting else _type_of(value)
    doc = f"The default for the topic config {definition.name}." if definition else None
    if setting is not None and not setting.at_once:
        doc = (doc or "") + NOT_AT_ONCE
    read_only = is_read_only(name)
    return ConfigEntry(name, value, source, kind, doc, synonyms, read_only=read_only)


_SYNONYM_OF = {d.broker_name: d for d in TOPIC_CONFIGS if d.broker_name}


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
        node_id = broker.config.node_id
        if resource.resource_name == "":
            entries = default_broker_entries(broker.dynamic_config)
        elif resource.resource_name == str(node_id):
            entries = broker_entries(broker.config, broker.dynamic_config)
        else:
            message = (
                f"Unexpected broker id, expected {node_id} or empty string, but received "
                f"{resource.resource_name}"
            )
            return _result(m, resource, ErrorCode.invalid_request, message, [])
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
