"""One transactional id as the coordinator holds it in memory.

The stored part (`TxnLogValue`) is what `__transaction_state` keeps; `last_producer_epoch` (the
epoch before the latest bump, so a retried InitProducerId is recognised) and `pending` (the
state a write in flight is taking it to) live only here, as in Kafka. While `pending` is set,
every other request for the id is answered CONCURRENT_TRANSACTIONS.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from weir.broker.txn.records import TxnLogValue
from weir.broker.txn.state import TxnState, check_transition

NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 2**15 - 1


def epoch_exhausted(epoch: int) -> bool:
    """Kafka leaves the last epoch unused: a fence bumps once more after a client's bump."""
    return epoch >= MAX_EPOCH - 1


@dataclass(slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    last_update_ms: int
    start_ms: int = -1
    partitions: set[tuple[str, int]] = field(default_factory=set)
    previous_producer_id: int = -1
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    pending: TxnState | None = None

    @classmethod
    def from_stored(cls, transactional_id: str, value: TxnLogValue) -> TransactionMetadata:
        return cls(
            transactional_id,
            value.producer_id,
            value.producer_epoch,
            value.timeout_ms,
            value.state,
            value.last_update_ms,
            value.start_ms,
            set(value.partitions),
            value.previous_producer_id,
        )

    def stored(self) -> TxnLogValue:
        return TxnLogValue(
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            timeout_ms=self.timeout_ms,
            state=self.state,
            partitions=tuple(sorted(self.partitions)),
            last_update_ms=self.last_update_ms,
            start_ms=self.start_ms,
            previous_producer_id=self.previous_producer_id,
        )

    def apply(self, value: TxnLogValue, last_producer_epoch: int | None = None) -> None:
        """Take on a state that has been written to the log (and, when given, the epoch the
        producer had before an InitProducerId bump)."""
        if value.state is not self.state:
            check_transition(self.state, value.state)
        if last_producer_epoch is not None:
            self.last_producer_epoch = last_producer_epoch
        self.producer_id = value.producer_id
        self.producer_epoch = value.producer_epoch
        self.timeout_ms = value.timeout_ms
        self.state = value.state
        self.partitions = set(value.partitions)
        self.last_update_ms = value.last_update_ms
        self.start_ms = value.start_ms
        self.previous_producer_id = value.previous_producer_id
