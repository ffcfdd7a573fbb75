"""AlterReplicaLogDirs (34): move replicas of this broker to another of its log directories
(`log.dirs`), as kafka-reassign-partitions.sh's `log_dirs` and `weir log-dirs move` ask
(KIP-113). Needs ALTER on the cluster, as in Kafka; each partition is answered on its own (see
`LogDirMovers.alter`), and the move goes on in the background once answered NONE."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.acl import AclOperation
from weir.broker.authz.checks import cluster_error
from weir.broker.context import BrokerContext, make
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.ALTER_REPLICA_LOG_DIRS, request.api_version)
    wanted = [(d.path, t.name, p) for d in request.body.dirs for t in d.topics
              for p in t.partitions]  # fmt: skip
    results: dict[str, dict[int, ErrorCode]] = {}
    refused = cluster_error(broker, AclOperation.ALTER)
    movers = broker.log_dir_movers
    for path, topic, index in wanted:
        error: ErrorCode
        if refused is not ErrorCode.none:
            error = refused
        elif movers is None:
            error = ErrorCode.kafka_storage_error
        else:
            error = await movers.alter(topic, index, path)
        results.setdefault(topic, {})[index] = error
    topics = tuple(
        make(m.AlterReplicaLogDirTopicResult, topic_name=topic, partitions=tuple(
            make(m.AlterReplicaLogDirPartitionResult, partition_index=index, error_code=error)
            for index, error in errors.items()
        ))
        for topic, errors in results.items()
    )  # fmt: skip
    return make(m.AlterReplicaLogDirsResponse, throttle_time=datetime.timedelta(0), results=topics)
