"""One handler module per API key, dispatched by `HANDLERS`. Handlers hold no state: each turns
a decoded request into a call on the broker's parts and a response (or None: no response)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import MappingProxyType
from typing import Any

from weir.broker.context import BrokerContext
from weir.broker.handlers import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_configs,
    alter_partition,
    api_versions,
    controlled_shutdown,
    create_partitions,
    create_topics,
    delete_groups,
    delete_records,
    delete_topics,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_producers,
    describe_transactions,
    elect_leaders,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leader_and_isr,
    leave_group,
    list_groups,
    list_offsets,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    stop_replica,
    sync_group,
    txn_offset_commit,
    update_metadata,
    write_txn_markers,
)
from weir.protocol.apis import ApiKey, InterBrokerApiKey
from weir.protocol.codec import Request

Handler = Callable[[BrokerContext, Request], Awaitable[Any]]

HANDLERS: MappingProxyType[int, Handler] = MappingProxyType({
    ApiKey.PRODUCE: produce.handle,
    ApiKey.FETCH: fetch.handle,
    ApiKey.LIST_OFFSETS: list_offsets.handle,
    ApiKey.METADATA: metadata.handle,
    ApiKey.OFFSET_COMMIT: offset_commit.handle,
    ApiKey.OFFSET_FETCH: offset_fetch.handle,
    ApiKey.FIND_COORDINATOR: find_coordinator.handle,
    ApiKey.JOIN_GROUP: join_group.handle,
    ApiKey.HEARTBEAT: heartbeat.handle,
    ApiKey.LEAVE_GROUP: leave_group.handle,
    ApiKey.SYNC_GROUP: sync_group.handle,
    ApiKey.DESCRIBE_GROUPS: describe_groups.handle,
    ApiKey.LIST_GROUPS: list_groups.handle,
    ApiKey.DELETE_GROUPS: delete_groups.handle,
    ApiKey.ELECT_LEADERS: elect_leaders.handle,
    ApiKey.OFFSET_DELETE: offset_delete.handle,
    ApiKey.API_VERSIONS: api_versions.handle,
    ApiKey.CREATE_TOPICS: create_topics.handle,
    ApiKey.DELETE_TOPICS: delete_topics.handle,
    ApiKey.DELETE_RECORDS: delete_records.handle,
    ApiKey.INIT_PRODUCER_ID: init_producer_id.handle,
    ApiKey.DESCRIBE_CONFIGS: describe_configs.handle,
    ApiKey.ALTER_CONFIGS: alter_configs.handle,
    ApiKey.CREATE_PARTITIONS: create_partitions.handle,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: incremental_alter_configs.handle,
    ApiKey.DESCRIBE_CLUSTER: describe_cluster.handle,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: offset_for_leader_epoch.handle,
    ApiKey.ADD_PARTITIONS_TO_TXN: add_partitions_to_txn.handle,
    ApiKey.ADD_OFFSETS_TO_TXN: add_offsets_to_txn.handle,
    ApiKey.END_TXN: end_txn.handle,
    ApiKey.TXN_OFFSET_COMMIT: txn_offset_commit.handle,
    ApiKey.WRITE_TXN_MARKERS: write_txn_markers.handle,
    ApiKey.DESCRIBE_PRODUCERS: describe_producers.handle,
    ApiKey.DESCRIBE_TRANSACTIONS: describe_transactions.handle,
    ApiKey.LIST_TRANSACTIONS: list_transactions.handle,
    ApiKey.ALTER_PARTITION: alter_partition.handle,
    InterBrokerApiKey.LEADER_AND_ISR: leader_and_isr.handle,
    InterBrokerApiKey.STOP_REPLICA: stop_replica.handle,
    InterBrokerApiKey.UPDATE_METADATA: update_metadata.handle,
    InterBrokerApiKey.CONTROLLED_SHUTDOWN: controlled_shutdown.handle,
})  # fmt: skip
