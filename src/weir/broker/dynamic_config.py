"""Dynamic broker configs, as Kafka's DynamicBrokerConfig has them: settings an operator changes
with AlterConfigs or IncrementalAlterConfigs on a BROKER resource, for one broker (the resource
names its node id) or for every broker (the empty name: the cluster default, entity `<default>`).

They are kept where the cluster keeps its metadata (ZooKeeper's /config/brokers/<id> and
/config/brokers/<default> in a cluster, the embedded store on a single node) and layered over the
static config: this broker's own, then the cluster default, then the config file and flags, then
Kafka's default. `DYNAMIC_SETTINGS` declares which settings may change (Kafka's list, for the
settings weir has); every other setting weir knows is read-only ("Cannot update these configs
dynamically: Set(...)"), and names it does not know are kept, as Kafka keeps custom ones.

A setting whose `at_once` is set is in effect as soon as it is stored (the reconfigure callbacks
get the new effective config); the others are stored and reported, and in effect from the
broker's next start.

Thread-safety (docs/threads.md): event-loop only. A cluster's change notifications arrive on
kazoo's thread and are
handed to the loop; store writes run in an executor.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kazoo.exceptions import KazooException
from kio.schema.errors import ErrorCode

from weir.broker.config import SCALED_SYNONYMS, SENSITIVE_SETTINGS, BrokerConfig
from weir.cluster.znodes import DEFAULT_ENTITY
from weir.cluster.zookeeper import ZooKeeperUnavailableError
from weir.storage import LogConfig
from weir.storage.config import (
    BROKER_SYNONYMS,
    TOPIC_CONFIGS,
    ConfigType,
    Validator,
    at_least,
    parse_config_value,
)

log = logging.getLogger(__name__)

#: DescribeConfigs' config sources (Kafka's ConfigSource ids)
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

ConfigChange = Callable[[dict[str, str]], dict[str, str]]


class BrokerConfigStore(Protocol):
    """Where the dynamic configs live: entity (node id or `<default>`) -> name -> value."""

    def configs(self) -> Mapping[str, Mapping[str, str]]: ...

    def alter(self, entity: str, change: ConfigChange) -> dict[str, str]: ...


@dataclass(frozen=True, slots=True)
class DynamicSetting:
    name: str
    type: ConfigType
    #: in effect as soon as it is stored; otherwise from the next start
    at_once: bool
    validator: Validator | None = None
    #: a thread pool's size: Kafka takes a new one between half and double the current one
    thread_count: bool = False

    def parse(self, raw: str) -> Any:
        return parse_config_value(self.name, self.type, raw, self.validator)


#: log.message.format.version is the one topic default Kafka does not let change at run time
_NOT_DYNAMIC_LOG_DEFAULTS = {"log.message.format.version"}
_T = ConfigType
DYNAMIC_SETTINGS: tuple[DynamicSetting, ...] = (
    *(DynamicSetting(d.broker_name, d.type, True, d.validator) for d in TOPIC_CONFIGS
      if d.broker_name and d.broker_name not in _NOT_DYNAMIC_LOG_DEFAULTS),
    DynamicSetting("max.connections", _T.INT, True, at_least(0)),
    DynamicSetting("max.connections.per.ip", _T.INT, True, at_least(0)),
    DynamicSetting("leader.replication.throttled.rate", _T.LONG, True, at_least(0)),
    DynamicSetting("follower.replication.throttled.rate", _T.LONG, True, at_least(0)),
    DynamicSetting("replica.alter.log.dirs.io.max.bytes.per.second", _T.LONG, True, at_least(0)),
    DynamicSetting("log.cleaner.backoff.ms", _T.LONG, False, at_least(0)),
    DynamicSetting("broker.pool", _T.STRING, True),
    DynamicSetting("transaction.partition.verification.enable", _T.BOOLEAN, False),
    *(DynamicSetting(name, _T.INT, False, thread_count=True) for name in (
        "num.io.threads", "num.network.threads", "num.replica.fetchers",
        "num.recovery.threads.per.data.dir", "background.threads")),
)  # fmt: skip
del _T
DYNAMIC_BY_NAME = {s.name: s for s in DYNAMIC_SETTINGS}
#: settings weir knows by prefix; none of them may change at run time
_STATIC_PREFIXES = ("listener.name.", "sasl.plain.users.")


@functools.cache
def _known_settings() -> frozenset[str]:
    return frozenset({
        *BrokerConfig().broker_configs(), *SCALED_SYNONYMS, "log.dir", "broker.rack",
        "zookeeper.connect", *(name.replace("_", ".") for name in SENSITIVE_SETTINGS),
    })  # fmt: skip


@functools.cache
def kafka_defaults() -> Mapping[str, str]:
    """Every setting's value when nothing sets it."""
    return BrokerConfig().broker_configs()


def is_read_only(name: str) -> bool:
    """Whether `name` is a setting weir knows that cannot change at run time."""
    if name in DYNAMIC_BY_NAME:
        return False
    return name in _known_settings() or name.startswith(_STATIC_PREFIXES)


def layered(static: BrokerConfig, *layers: Mapping[str, str]) -> BrokerConfig:
    """`static` with the dynamic layers applied over it, later layers winning. Values that do
    not parse (written by another tool) are logged and left out."""
    merged: dict[str, str] = {}
    for layer in layers:
        merged.update(layer)
    topic: dict[str, str] = {}
    values: dict[str, Any] = {}
    for name, raw in merged.items():
        setting = DYNAMIC_BY_NAME.get(name)
        if setting is None:
            continue  # a custom name, kept and reported but meaning nothing to weir
        try:
            value = setting.parse(raw)
        except ValueError as exc:
            log.warning("dynamic broker config left out: %s", exc)
            continue
        if name in BROKER_SYNONYMS:
            topic[BROKER_SYNONYMS[name]] = raw
        else:
            values[name.replace(".", "_")] = value
    config = dataclasses.replace(static, **values)
    if topic:
        config = dataclasses.replace(
            config, log_defaults=LogConfig.from_properties(topic, static.log_defaults)
        )
    return config


def validate(proposed: Mapping[str, str], current: BrokerConfig) -> None:
    """Check an entity's whole new dynamic config; ValueError in Kafka's words."""
    read_only = sorted(name for name in proposed if is_read_only(name))
    if read_only:
        raise ValueError(f"Cannot update these configs dynamically: Set({', '.join(read_only)})")
    topic = {}
    for name, raw in proposed.items():
        setting = DYNAMIC_BY_NAME.get(name)
        if setting is None:
            continue
        value = setting.parse(raw)
        if setting.thread_count:
            _check_thread_count(name, value, getattr(current, name.replace(".", "_")))
        if name in BROKER_SYNONYMS:
            topic[BROKER_SYNONYMS[name]] = raw
    LogConfig.from_properties(topic, current.log_defaults)


def _check_thread_count(name: str, new: int, old: int) -> None:
    if new == old:
        return
    failed = f"Dynamic thread count update validation failed for {name}={new}"
    if new <= 0:
        raise ValueError(f"{failed}, value should be at least 1")
    if new < old / 2:
        raise ValueError(f"{failed}, value should be at least half the current value {old}")
    if new > old * 2:
        raise ValueError(
            f"{failed}, value should not be greater than double the current value {old}"
        )


class DynamicBrokerConfig:
    """This broker's static config, the dynamic layers over it, and the effective result."""

    def __init__(self, static: BrokerConfig, store: BrokerConfigStore) -> None:
        self.static = static
        self._store = store
        self._reconfigurables: list[Callable[[BrokerConfig], None]] = []
        self.current = layered(static, *self._layers_low_to_high())

    @property
    def entity(self) -> str:
        """This broker's entity: its node id."""
        return str(self.static.node_id)

    def configs_of(self, entity: str) -> Mapping[str, str]:
        return self._store.configs().get(entity, {})

    def per_broker(self) -> Mapping[str, str]:
        return self._store.configs().get(self.entity, {})

    def cluster_default(self) -> Mapping[str, str]:
        return self._store.configs().get(DEFAULT_ENTITY, {})

    def _layers_low_to_high(self) -> tuple[Mapping[str, str], Mapping[str, str]]:
        return self.cluster_default(), self.per_broker()

    def add_reconfigurable(self, reconfigure: Callable[[BrokerConfig], None]) -> None:
        """Have `reconfigure(effective config)` called whenever the dynamic configs change."""
        self._reconfigurables.append(reconfigure)

    def reload(self) -> None:
        """Recompute the effective config from the store and hand it to every reconfigurable
        (on the loop)."""
        self.current = layered(self.static, *self._layers_low_to_high())
        for reconfigure in self._reconfigurables:
            try:
                reconfigure(self.current)
            except Exception:
                log.exception("applying the dynamic broker configs failed")

    def follow(self, loop: asyncio.AbstractEventLoop) -> Callable[[str], None]:
        """A change listener for the store's notifications (any thread): reload on `loop` when
        this broker's entity or the default changed."""

        def changed(entity: str) -> None:
            if entity in (self.entity, DEFAULT_ENTITY):
                loop.call_soon_threadsafe(self.reload)

        return changed

    async def alter(
        self, resource_name: str, change: ConfigChange, validate_only: bool
    ) -> tuple[ErrorCode, str | None]:
        """Apply `change` to the entity a BROKER resource names (`""`: the cluster default);
        (error, message) as Kafka's ZooKeeper-mode broker answers."""
        resource = f"ConfigResource(type=BROKER, name='{resource_name}')"
        if resource_name and not resource_name.lstrip("-").isdigit():
            return ErrorCode.invalid_request, (
                f"Broker id must be an integer, but it is: {resource_name}"
            )
        if resource_name and int(resource_name) != self.static.node_id:
            return ErrorCode.invalid_request, (
                f"Unexpected broker id, expected {self.static.node_id}, but received "
                f"{resource_name}"
            )
        entity = resource_name or DEFAULT_ENTITY

        def checked(current: dict[str, str]) -> dict[str, str]:
            proposed = change(current)
            validate(proposed, self.current)
            return proposed

        try:
            if validate_only:
                checked(dict(self.configs_of(entity)))
                return ErrorCode.none, None
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, self._store.alter, entity, checked)
        except ValueError as exc:
            return ErrorCode.invalid_request, f"Invalid config value for resource {resource}: {exc}"
        except (ZooKeeperUnavailableError, KazooException) as exc:
            return ErrorCode.request_timed_out, f"ZooKeeper refused the change: {exc!r}"
        except OSError as exc:
            return ErrorCode.kafka_storage_error, f"broker configs not written: {exc}"
        log.info("dynamic broker config of %s: %s", entity, dict(self.configs_of(entity)))
        self.reload()
        return ErrorCode.none, None

    # ---- DescribeConfigs ---------------------------------------------------------------------

    def sources(self, name: str) -> list[tuple[str, str, int]]:
        """`name`'s synonyms as DescribeConfigs lists them, highest precedence first:
        (name, value, source) for each layer that sets it, down to Kafka's default."""
        found = []
        for layer, source in (
            (self.per_broker(), DYNAMIC_BROKER_CONFIG),
            (self.cluster_default(), DYNAMIC_DEFAULT_BROKER_CONFIG),
        ):
            if name in layer:
                found.append((name, layer[name], source))
        if name in self.static.explicit:
            static_value = self.static.broker_configs().get(name)
            if static_value is not None:
                found.append((name, static_value, STATIC_BROKER_CONFIG))
        if name in kafka_defaults():
            found.append((name, kafka_defaults()[name], DEFAULT_CONFIG))
        return found

    def custom_names(self) -> list[str]:
        """Names in the dynamic layers that are no setting weir knows."""
        names = {*self.per_broker(), *self.cluster_default()}
        return sorted(n for n in names if n not in DYNAMIC_BY_NAME and not is_read_only(n))
