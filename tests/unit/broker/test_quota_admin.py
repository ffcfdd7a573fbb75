"""DescribeClientQuotas' matching and AlterClientQuotas' checks, with Kafka's messages."""

from __future__ import annotations

import math

import pytest
from kio.schema.errors import ErrorCode

from weir.broker.quota_admin import (
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    FilterComponent,
    QuotaOp,
    QuotaRequestError,
    alteration,
    describe,
    entity_components,
    parse_entity,
)
from weir.cluster.client_quota_configs import QuotaEntity
from weir.cluster.znodes import DEFAULT_ENTITY as D

CONFIGS = {
    QuotaEntity("alice"): {"producer_byte_rate": "1024", "SCRAM-SHA-512": "salt=x"},
    QuotaEntity("alice", "app"): {"consumer_byte_rate": "2048"},
    QuotaEntity(D): {"request_percentage": "50.0"},
    QuotaEntity(None, "app"): {"producer_byte_rate": "10"},
    QuotaEntity(None, D): {"producer_byte_rate": "20"},
    QuotaEntity("bob"): {"SCRAM-SHA-256": "salt=y"},  # credentials only: no quota
}


def entities(components: list[FilterComponent], strict: bool) -> list[QuotaEntity]:
    return [entity for entity, _ in describe(CONFIGS, components, strict)]


def test_no_components_non_strict_lists_every_entity_with_quotas() -> None:
    assert entities([], strict=False) == [
        QuotaEntity(D), QuotaEntity("alice"), QuotaEntity("alice", "app"),
        QuotaEntity(None, D), QuotaEntity(None, "app"),
    ]  # fmt: skip


def test_values_are_quotas_only() -> None:
    [(_, values)] = describe(CONFIGS, [FilterComponent("user", MATCH_EXACT, "alice")], True)
    assert values == {"producer_byte_rate": 1024.0}


def test_exact_user_non_strict_includes_its_client_ids() -> None:
    found = entities([FilterComponent("user", MATCH_EXACT, "alice")], strict=False)
    assert found == [QuotaEntity("alice"), QuotaEntity("alice", "app")]


def test_default_and_specified_matches() -> None:
    assert entities([FilterComponent("user", MATCH_DEFAULT, None)], True) == [QuotaEntity(D)]
    assert entities([FilterComponent("client-id", MATCH_SPECIFIED, None)], True) == [
        QuotaEntity(None, D), QuotaEntity(None, "app"),
    ]  # fmt: skip


def test_both_types_strict() -> None:
    found = entities([FilterComponent("user", MATCH_SPECIFIED, None),
                      FilterComponent("client-id", MATCH_EXACT, "app")], True)  # fmt: skip
    assert found == [QuotaEntity("alice", "app")]


@pytest.mark.parametrize(("component", "error", "message"), [
    (FilterComponent("group", MATCH_EXACT, "g"), ErrorCode.unsupported_version,
     "Custom entity type 'group' not supported"),
    (FilterComponent("", MATCH_EXACT, "g"), ErrorCode.invalid_request,
     "Unexpected empty filter component entity type"),
    (FilterComponent("user", 7, None), ErrorCode.invalid_request, "Unexpected match type: 7"),
])  # fmt: skip
def test_bad_filters_are_refused(
    component: FilterComponent, error: ErrorCode, message: str
) -> None:
    with pytest.raises(QuotaRequestError) as refused:
        describe(CONFIGS, [component], strict=False)
    assert (refused.value.error, refused.value.message) == (error, message)


def test_duplicate_filter_types_are_refused() -> None:
    twice = [FilterComponent("user", MATCH_SPECIFIED, None)] * 2
    with pytest.raises(QuotaRequestError, match="Duplicate user filter component entity type"):
        describe(CONFIGS, twice, strict=False)


def test_entities_parse_with_defaults_and_back() -> None:
    entity = parse_entity([("user", None), ("client-id", "app")])
    assert entity == QuotaEntity(D, "app")
    assert entity.path == "users/<default>/clients/app"
    assert entity_components(entity) == [("user", None), ("client-id", "app")]


@pytest.mark.parametrize(("components", "message"), [
    ([("group", "g")], "Unhandled client quota entity type: group"),
    ([("user", "")], "Empty user not supported"),
    ([], "Invalid empty client quota entity"),
])  # fmt: skip
def test_bad_entities_are_refused(components: list[tuple[str, str | None]], message: str) -> None:
    with pytest.raises(QuotaRequestError) as refused:
        parse_entity(components)
    assert (refused.value.error, refused.value.message) == (ErrorCode.invalid_request, message)


def test_alteration_sets_and_removes_and_keeps_other_keys() -> None:
    change = alteration([
        QuotaOp("producer_byte_rate", 1024.0, remove=False),
        QuotaOp("request_percentage", 12.5, remove=False),
        QuotaOp("consumer_byte_rate", 0.0, remove=True),
    ])  # fmt: skip
    config = {"consumer_byte_rate": "10", "SCRAM-SHA-512": "salt=x"}
    assert change(config) == {
        "producer_byte_rate": "1024", "request_percentage": "12.5", "SCRAM-SHA-512": "salt=x",
    }  # fmt: skip


@pytest.mark.parametrize(("op", "message"), [
    (QuotaOp("fetch_rate", 1.0, False), "Invalid configuration key fetch_rate"),
    (QuotaOp("producer_byte_rate", -1.0, False),
     "Invalid value -1.0 for configuration producer_byte_rate: Value must be at least 0"),
    (QuotaOp("producer_byte_rate", 1.5, False),
     "Configuration producer_byte_rate must be a LONG value"),
    (QuotaOp("request_percentage", math.nan, False),
     "Invalid value NaN for configuration request_percentage: Value must be a finite number"),
])  # fmt: skip
def test_bad_ops_are_refused_before_anything_changes(op: QuotaOp, message: str) -> None:
    with pytest.raises(QuotaRequestError) as refused:
        alteration([QuotaOp("consumer_byte_rate", 5.0, False), op])
    assert (refused.value.error, refused.value.message) == (ErrorCode.invalid_request, message)
