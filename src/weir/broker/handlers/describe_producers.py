"""DescribeProducers (61): the producers a partition's leader knows (id, epoch, last sequence and
timestamp) and the first offset of each one's open transaction there — what
kafka-transactions.sh (and `weir txn find-hanging`) compares with the coordinators' view."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.acl import AclOperation
from weir.broker.authz.checks import topic_error
from weir.broker.context import BrokerContext, make
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.DESCRIBE_PRODUCERS, request.api_version)
    topics = []
    for topic in request.body.topics:
        partitions = []
        for index in topic.partition_indexes:
            partition = broker.replicas.get(topic.name, index)
            refused = topic_error(broker, AclOperation.READ, topic.name)
            error = refused or broker.replicas.leader_error(topic.name, index)
            if error is not ErrorCode.none or partition is None:
                partitions.append(make(m.PartitionResponse, partition_index=index,
                                       error_code=error, active_producers=()))  # fmt: skip
                continue
            producers = partition.producers
            active = tuple(
                make(m.ProducerState, producer_id=producer_id, producer_epoch=entry.epoch,
                     last_sequence=entry.batches[-1].last_sequence if entry.batches else -1,
                     last_timestamp=entry.last_timestamp, coordinator_epoch=-1,
                     current_txn_start_offset=producers.ongoing.get(producer_id, -1))
                for producer_id, entry in sorted(producers.producers.items())
            )  # fmt: skip
            partitions.append(make(m.PartitionResponse, partition_index=index,
                                   error_code=ErrorCode.none, active_producers=active))  # fmt: skip
        topics.append(make(m.TopicResponse, name=topic.name, partitions=tuple(partitions)))
    return make(m.DescribeProducersResponse, throttle_time=datetime.timedelta(0),
                topics=tuple(topics))  # fmt: skip
