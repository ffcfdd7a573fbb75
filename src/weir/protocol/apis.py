"""The API keys Weir serves and the version range it advertises for each.

This table is the contract with clients: ApiVersions returns exactly it, the decoder refuses
anything outside it, and the broker has one handler per key in it (a test checks both ways).
Produce is advertised from 0 because librdkafka looks for that; versions below 3 are refused
with UNSUPPORTED_VERSION, as Kafka 4 does. In cluster mode the broker also serves Kafka's
ZooKeeper-era inter-broker APIs (`INTER_BROKER_VERSIONS`, merged by `cluster_advertised`).
"""

from __future__ import annotations

import enum
from types import MappingProxyType
from typing import Final


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    ALTER_PARTITION = 56
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66


ADVERTISED: Final = MappingProxyType(
    {
        ApiKey.PRODUCE: (0, 9),
        ApiKey.FETCH: (4, 12),
        ApiKey.LIST_OFFSETS: (1, 7),
        ApiKey.METADATA: (0, 12),
        ApiKey.OFFSET_COMMIT: (2, 8),
        ApiKey.OFFSET_FETCH: (1, 8),
        ApiKey.FIND_COORDINATOR: (0, 4),
        ApiKey.JOIN_GROUP: (0, 7),
        ApiKey.HEARTBEAT: (0, 4),
        ApiKey.LEAVE_GROUP: (0, 5),
        ApiKey.SYNC_GROUP: (0, 5),
        ApiKey.DESCRIBE_GROUPS: (0, 5),
        ApiKey.LIST_GROUPS: (0, 4),
        ApiKey.DELETE_GROUPS: (0, 2),
        ApiKey.ELECT_LEADERS: (0, 2),
        ApiKey.OFFSET_DELETE: (0, 0),
        ApiKey.API_VERSIONS: (0, 3),
        ApiKey.CREATE_TOPICS: (2, 7),
        ApiKey.DELETE_TOPICS: (1, 6),
        ApiKey.DELETE_RECORDS: (0, 2),
        ApiKey.INIT_PRODUCER_ID: (0, 4),
        ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
        # v4 is the broker-to-broker batched form (KIP-890 verification): cluster mode only
        ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
        ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
        # v5 is KIP-890's epoch bump at every EndTxn (transaction version 2), not served
        ApiKey.END_TXN: (0, 4),
        ApiKey.TXN_OFFSET_COMMIT: (0, 3),
        # coordinators' markers in a cluster; an operator's abort of a hanging transaction
        ApiKey.WRITE_TXN_MARKERS: (1, 1),
        ApiKey.DESCRIBE_ACLS: (1, 3),
        ApiKey.CREATE_ACLS: (1, 3),
        ApiKey.DELETE_ACLS: (1, 3),
        ApiKey.DESCRIBE_CONFIGS: (1, 4),
        ApiKey.ALTER_CONFIGS: (0, 2),
        ApiKey.CREATE_PARTITIONS: (0, 3),
        ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
        # v0 is gone from Kafka 4's schemas (and kio's)
        ApiKey.ALTER_REPLICA_LOG_DIRS: (1, 2),
        ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
        ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),
        ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
        ApiKey.DESCRIBE_CLUSTER: (0, 1),
        ApiKey.DESCRIBE_PRODUCERS: (0, 0),
        ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
        ApiKey.LIST_TRANSACTIONS: (0, 2),
        ApiKey.SASL_HANDSHAKE: (0, 1),
        ApiKey.SASL_AUTHENTICATE: (0, 2),
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
        ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
        ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    }
)

#: Versions that are advertised but refused with UNSUPPORTED_VERSION.
REFUSED_BELOW: Final = MappingProxyType({ApiKey.PRODUCE: 3})


class InterBrokerApiKey(enum.IntEnum):
    """Kafka's ZooKeeper-era controller APIs. Kafka 4 and kio 0.6.5 dropped them (so they are
    not `ApiKey`s); their classes come from `weir.protocol.kio_legacy`."""

    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7


#: Served in cluster mode only: the broker merges these into ADVERTISED there. The ranges are
#: Kafka 3.x's, except ControlledShutdown v0, whose header has no client id (Kafka 3.x sends v3).
INTER_BROKER_VERSIONS: Final = MappingProxyType(
    {
        InterBrokerApiKey.LEADER_AND_ISR: (0, 7),
        InterBrokerApiKey.STOP_REPLICA: (0, 4),
        InterBrokerApiKey.UPDATE_METADATA: (0, 8),
        InterBrokerApiKey.CONTROLLED_SHUTDOWN: (1, 3),
    }
)


#: Served in cluster mode only, to other brokers (these ranges replace ADVERTISED's): a leader's
#: ISR changes, sent to the controller, and a leader's question whether a partition is in a
#: producer's transaction, sent to its coordinator (AddPartitionsToTxn v4, KIP-890).
CLUSTER_ONLY_VERSIONS: Final = MappingProxyType(
    {ApiKey.ALTER_PARTITION: (2, 3), ApiKey.ADD_PARTITIONS_TO_TXN: (0, 4)}
)


def cluster_advertised() -> dict[int, tuple[int, int]]:
    """The table of a broker in a ZooKeeper cluster: ADVERTISED plus INTER_BROKER_VERSIONS and
    CLUSTER_ONLY_VERSIONS (keyed by plain ints, as `decodable` takes them)."""
    merged = {int(k): v for k, v in ADVERTISED.items()}
    merged.update({int(k): v for k, v in INTER_BROKER_VERSIONS.items()})
    merged.update({int(k): v for k, v in CLUSTER_ONLY_VERSIONS.items()})
    return merged


def decodable(advertised: dict[int, tuple[int, int]] | None = None) -> dict[int, tuple[int, int]]:
    """The version ranges the decoder accepts: advertised minus the refused ones."""
    source = advertised if advertised is not None else ADVERTISED
    table: dict[int, tuple[int, int]] = {int(k): v for k, v in source.items()}
    for key, low in REFUSED_BELOW.items():
        if key in table:
            table[key] = (max(low, table[key][0]), table[key][1])
    return table
