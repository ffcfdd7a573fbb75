"""DescribeCluster (60): cluster id, controller and brokers, and when asked (KIP-430) the
operations the client may do on the cluster."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.authz.checks import cluster_operations
from weir.broker.context import BrokerContext, make
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module

NO_OPERATIONS = -(2**31)


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.DESCRIBE_CLUSTER, request.api_version)
    nodes = tuple(
        make(m.DescribeClusterBroker, broker_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
        for b in broker.live_brokers()
    )
    return make(
        m.DescribeClusterResponse,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=1,
        cluster_id=broker.metadata.cluster_id,
        controller_id=broker.controller_id,
        brokers=nodes,
        cluster_authorized_operations=cluster_operations(broker)
        if request.body.include_cluster_authorized_operations
        else NO_OPERATIONS,
    )
