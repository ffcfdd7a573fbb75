"""WriteTxnMarkers (27): a transaction coordinator on another broker asks this one, the leader
of some of the transaction's partitions, to end it there: a COMMIT or ABORT control batch is
appended to each and replicated to its in-sync replicas before the answer (as Kafka's leaders
do). On `__consumer_offsets` the marker also applies or drops the offsets the producer committed
in the transaction. An operator's `weir txn abort` (Kafka's admin abortTransaction) sends an
ABORT for a hanging transaction the same way, on a single node too."""

from __future__ import annotations

from typing import Any

from weir.broker.authz.acl import AclOperation
from weir.broker.authz.checks import cluster_error
from weir.broker.context import BrokerContext, make
from weir.broker.handlers.per_partition import partition_errors
from weir.broker.txn.markers import append_markers_here, control_batch
from weir.protocol.apis import ApiKey
from weir.protocol.codec import Request, response_module


async def handle(broker: BrokerContext, request: Request) -> Any:
    m = response_module(ApiKey.WRITE_TXN_MARKERS, request.api_version)
    now = broker.clock.milliseconds()
    verification = broker.verification
    on_marker = verification.guards.marker_written if verification is not None else None
    results = []
    refused = cluster_error(broker, AclOperation.CLUSTER_ACTION)
    for marker in request.body.markers:
        partitions = [(t.name, int(i)) for t in marker.topics for i in t.partition_indexes]
        batch = control_batch(marker.producer_id, marker.producer_epoch,
                              marker.coordinator_epoch, marker.transaction_result, now)  # fmt: skip
        outcome = dict.fromkeys(partitions, refused) if refused else await append_markers_here(
            broker.replicas, batch, marker.producer_id, marker.transaction_result, partitions,
            broker.groups.complete_transaction, on_marker,
        )  # fmt: skip
        topics = partition_errors(outcome, m.WritableTxnMarkerPartitionResult,
                                  m.WritableTxnMarkerTopicResult)  # fmt: skip
        results.append(make(m.WritableTxnMarkerResult, producer_id=marker.producer_id,
                            topics=topics))  # fmt: skip
    return make(m.WriteTxnMarkersResponse, markers=tuple(results))
