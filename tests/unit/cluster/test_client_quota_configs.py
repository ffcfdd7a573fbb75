"""Client quota entities' paths in Kafka's ZooKeeper layout, and the embedded store's copy."""

from __future__ import annotations

from pathlib import Path

import pytest

from weir.cluster.client_quota_configs import QuotaEntity
from weir.cluster.metadata import EmbeddedMetadataStore
from weir.cluster.znodes import (
    DEFAULT_ENTITY,
    encode_change_path,
    parse_change_path,
    parse_entity_config,
)


@pytest.mark.parametrize(("entity", "path"), [
    (QuotaEntity("alice"), "users/alice"),
    (QuotaEntity(DEFAULT_ENTITY), "users/<default>"),
    (QuotaEntity("alice", "app 1"), "users/alice/clients/app%201"),
    (QuotaEntity(DEFAULT_ENTITY, DEFAULT_ENTITY), "users/<default>/clients/<default>"),
    (QuotaEntity(None, "a/b*"), "clients/a%2Fb%2A"),
    (QuotaEntity(None, DEFAULT_ENTITY), "clients/<default>"),
])  # fmt: skip
def test_entity_paths_are_kafkas_and_read_back(entity: QuotaEntity, path: str) -> None:
    assert entity.path == path
    assert QuotaEntity.from_path(path) == entity
    assert QuotaEntity.from_path(parse_change_path(encode_change_path(path))) == entity


@pytest.mark.parametrize("path", ["topics/t", "brokers/1", "users", "users/a/groups/b", ""])
def test_other_paths_are_no_quota_entity(path: str) -> None:
    assert QuotaEntity.from_path(path) is None


def test_a_znode_without_data_has_an_empty_config() -> None:
    assert parse_entity_config("/config/users/alice", b"") == {}


def test_the_embedded_store_keeps_quotas_across_restarts(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(tmp_path)
    entity = QuotaEntity("alice", "app")
    store.client_quota_configs.alter(entity, lambda c: {**c, "producer_byte_rate": "1024"})
    store.client_quota_configs.alter(QuotaEntity(None, "x"), lambda c: {"consumer_byte_rate": "1"})
    store.client_quota_configs.alter(QuotaEntity(None, "x"), lambda c: {})
    reopened = EmbeddedMetadataStore(tmp_path)
    assert reopened.client_quota_configs.configs() == {entity: {"producer_byte_rate": "1024"}}
