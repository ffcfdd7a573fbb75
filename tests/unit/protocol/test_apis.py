"""The version table is the contract: one handler per advertised key, refusals inside it."""

from __future__ import annotations

from kio.schema.index import api_key_map

from weir.broker.handlers import HANDLERS
from weir.protocol.apis import (
    ADVERTISED,
    CLUSTER_ONLY_VERSIONS,
    INTER_BROKER_VERSIONS,
    REFUSED_BELOW,
    ApiKey,
    InterBrokerApiKey,
    cluster_advertised,
    decodable,
)


def test_every_advertised_api_has_a_handler_and_every_handler_is_advertised() -> None:
    cluster_only = (set(INTER_BROKER_VERSIONS) | set(CLUSTER_ONLY_VERSIONS)) - set(ADVERTISED)
    assert set(ADVERTISED) == set(HANDLERS) - cluster_only


def test_a_cluster_broker_handles_the_controllers_requests() -> None:
    served = set(cluster_advertised()) & set(HANDLERS)
    assert served == set(ADVERTISED) | {
        InterBrokerApiKey.LEADER_AND_ISR,
        InterBrokerApiKey.STOP_REPLICA,
        InterBrokerApiKey.UPDATE_METADATA,
        InterBrokerApiKey.CONTROLLED_SHUTDOWN,
        ApiKey.ALTER_PARTITION,
    }


def test_a_cluster_broker_answers_add_partitions_to_txn_v4_from_other_brokers() -> None:
    assert ADVERTISED[ApiKey.ADD_PARTITIONS_TO_TXN] == (0, 3)
    assert cluster_advertised()[ApiKey.ADD_PARTITIONS_TO_TXN] == (0, 4)


def test_api_key_names_are_kafkas() -> None:
    for key in ApiKey:
        assert api_key_map[key.value] == key.name.lower()


def test_advertised_ranges_are_well_formed() -> None:
    for key, (low, high) in ADVERTISED.items():
        assert 0 <= low <= high, key


def test_produce_is_advertised_from_0_but_decodable_only_from_3() -> None:
    assert ADVERTISED[ApiKey.PRODUCE][0] == 0
    assert REFUSED_BELOW[ApiKey.PRODUCE] == 3
    assert decodable()[ApiKey.PRODUCE] == (3, ADVERTISED[ApiKey.PRODUCE][1])


def test_decodable_is_the_advertised_table_minus_refusals() -> None:
    table = decodable()
    assert set(table) == set(ADVERTISED)
    for key, (low, high) in ADVERTISED.items():
        assert table[key] == (max(low, REFUSED_BELOW.get(key, low)), high)


def test_decodable_of_a_given_table_applies_refusals_without_changing_it() -> None:
    given = {ApiKey.PRODUCE: (0, 5), ApiKey.METADATA: (1, 2)}
    assert decodable(given) == {0: (3, 5), 3: (1, 2)}
    assert given == {ApiKey.PRODUCE: (0, 5), ApiKey.METADATA: (1, 2)}
    assert decodable({ApiKey.PRODUCE: (4, 9)}) == {0: (4, 9)}
