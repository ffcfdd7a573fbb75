"""What DescribeClientQuotas and AlterClientQuotas do with the quota configs, with the checks and
messages of Kafka's ZooKeeper-mode broker (ZkAdminManager): entity types `user` and `client-id`
(a null name: the type's `<default>`), the keys in `client_quotas.QUOTA_KEYS`, whole numbers
for the byte rates; values are stored as text, as Kafka writes them.

An entry of AlterClientQuotas is checked whole before anything is written, so a bad entry
changes nothing. Pure: the handlers read and write the store.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from weir.broker.client_quotas import QUOTA_KEYS
from weir.cluster.client_quota_configs import QuotaConfigs, QuotaEntity
from weir.cluster.entity_configs import ConfigChange
from weir.cluster.znodes import DEFAULT_ENTITY

#: ClientQuotaEntity's entity types
USER, CLIENT_ID, IP = "user", "client-id", "ip"
#: DescribeClientQuotas' match types
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
_EPSILON = 1e-6


class QuotaRequestError(Exception):
    """A request Kafka refuses, with its error code and message."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def _invalid(message: str) -> QuotaRequestError:
    return QuotaRequestError(ErrorCode.invalid_request, message)


@dataclass(frozen=True, slots=True)
class QuotaOp:
    """One change of AlterClientQuotas: set `key` to `value`, or remove it."""

    key: str
    value: float
    remove: bool


def parse_entity(components: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """(entity type, name or None for the default) pairs -> the entity they name."""
    parts: dict[str, str] = {}
    for entity_type, name in components:
        if entity_type not in (USER, CLIENT_ID):
            raise _invalid(f"Unhandled client quota entity type: {entity_type}")
        if name is not None and not name:
            raise _invalid(f"Empty {entity_type} not supported")
        parts[entity_type] = DEFAULT_ENTITY if name is None else name
    if not parts:
        raise _invalid("Invalid empty client quota entity")
    return QuotaEntity(parts.get(USER), parts.get(CLIENT_ID))


def alteration(ops: Sequence[QuotaOp]) -> ConfigChange:
    """The change `ops` make to an entity's config (checked first: QuotaRequestError)."""
    values: list[tuple[str, str | None]] = [
        (op.key, None if op.remove else config_value(op.key, op.value)) for op in ops
    ]

    def change(config: dict[str, str]) -> dict[str, str]:
        for key, value in values:
            if value is None:
                config.pop(key, None)
            else:
                config[key] = value
        return config

    return change


def config_value(key: str, value: float) -> str:
    """The stored text of a quota value, as Kafka writes it; QuotaRequestError if `key` is
    no quota or `value` is not one it can take."""
    whole_numbers = QUOTA_KEYS.get(key)
    if whole_numbers is None:
        raise _invalid(f"Invalid configuration key {key}")
    if not math.isfinite(value) or value < 0:
        why = "Value must be at least 0" if value < 0 else "Value must be a finite number"
        raise _invalid(f"Invalid value {_java_double(value)} for configuration {key}: {why}")
    if not whole_numbers:
        return _java_double(value)
    number = int(value + _EPSILON)
    if abs(number - value) > _EPSILON:
        raise _invalid(f"Configuration {key} must be a LONG value")
    return str(number)


def _java_double(value: float) -> str:
    """A double as Java's Double.toString writes the usual ones: 50.0, 0.5, -1.0."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(float(value))


# ---- DescribeClientQuotas --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FilterComponent:
    """One component of a DescribeClientQuotas filter: an entity type and how its name must
    match (MATCH_EXACT `match`, MATCH_DEFAULT, or MATCH_SPECIFIED: any name)."""

    entity_type: str
    match_type: int
    match: str | None

    def matches(self, name: str | None) -> bool:
        if self.match_type == MATCH_SPECIFIED:
            return name is not None
        wanted = DEFAULT_ENTITY if self.match_type == MATCH_DEFAULT else self.match
        return name == wanted


def describe(
    configs: QuotaConfigs, components: Sequence[FilterComponent], strict: bool
) -> list[tuple[QuotaEntity, dict[str, float]]]:
    """The entities the filter matches that have quotas, with their quota values."""
    by_type = _filter_by_type(components)
    out = []
    for entity, config in sorted(configs.items(), key=lambda item: item[0].sort_key):
        values = quota_values(config)
        if values and all(
            _matches(by_type.get(entity_type), name, strict)
            for entity_type, name in ((USER, entity.user), (CLIENT_ID, entity.client_id))
        ):
            out.append((entity, values))
    return out


def _filter_by_type(components: Sequence[FilterComponent]) -> dict[str, FilterComponent]:
    by_type: dict[str, FilterComponent] = {}
    for component in components:
        entity_type = component.entity_type
        if entity_type == IP:
            raise QuotaRequestError(
                ErrorCode.unsupported_version, "IP quotas are not supported by this broker"
            )
        if entity_type == "":
            raise _invalid("Unexpected empty filter component entity type")
        if entity_type not in (USER, CLIENT_ID):
            raise QuotaRequestError(
                ErrorCode.unsupported_version, f"Custom entity type '{entity_type}' not supported"
            )
        if entity_type in by_type:
            raise _invalid(
                f"Duplicate {'user' if entity_type == USER else 'client'} filter component "
                "entity type"
            )
        if component.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            raise _invalid(f"Unexpected match type: {component.match_type}")
        if component.match_type == MATCH_EXACT and component.match is None:
            raise _invalid(f"Missing match for exact {entity_type} filter component")
        by_type[entity_type] = component
    return by_type


def _matches(component: FilterComponent | None, name: str | None, strict: bool) -> bool:
    if component is not None:
        return component.matches(name)
    return name is None or not strict


def quota_values(config: Mapping[str, str]) -> dict[str, float]:
    """The quota configs among an entity's config (a user's holds its SCRAM credentials too)."""
    values = {}
    for key, text in config.items():
        if key in QUOTA_KEYS:
            try:
                values[key] = float(text)
            except ValueError:
                continue  # written by another tool; not a quota the broker applies either
    return values


def entity_components(entity: QuotaEntity) -> list[tuple[str, str | None]]:
    """(entity type, name or None for the default) of each part of `entity`, user first."""
    parts = [(USER, entity.user), (CLIENT_ID, entity.client_id)]
    return [(t, None if n == DEFAULT_ENTITY else n) for t, n in parts if n is not None]
