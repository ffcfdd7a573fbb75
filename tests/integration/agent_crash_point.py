"""Stores events in an agent's spool and delivers them as the agent's exactly-once sender does,
then kills itself with SIGKILL at a chosen point of the two-phase delivery, run as its own process
by test_agent_exactly_once.py (a random kill -9 of the agent rarely lands exactly there).

Usage: python agent_crash_point.py BOOTSTRAP SPOOL TOPIC COUNT POINT
POINT: `prepared` (the batch produced in an open transaction, the intent written) or
`committed` (the transaction committed, the ring not yet acknowledged).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from weir.agent.config import AgentConfig
from weir.agent.event import decode_fields, encode_record
from weir.agent.exactly_once import INTENT_SUFFIX, AgentIdentity, RingTransactions, with_position
from weir.agent.queue import DiskQueue, Durability
from weir.agent.registry import RING_SUFFIX
from weir.clock import SystemClock


def main() -> None:
    bootstrap, spool, topic, count, point = sys.argv[1:6]
    identity = AgentIdentity.load_or_create(Path(spool))
    path = Path(spool) / topic / f"0{RING_SUFFIX}"
    queue = DiskQueue(path, topic=topic, partition=0, durability=Durability.EVENTS,
                      capacity=AgentConfig().queue_bytes, clock=SystemClock())  # fmt: skip
    queue.append([encode_record(0, None, f"event-{i}".encode()) for i in range(int(count))])
    transactions = RingTransactions(bootstrap=bootstrap, settings=None, agent=identity,
                                    topic=topic, partition=0,
                                    intent_path=path.with_suffix(INTENT_SUFFIX))  # fmt: skip
    transactions.resume(queue.state().read_sequence)
    batch = queue.peek(int(count), 1 << 20)
    records = with_position([decode_fields(p) for p in batch.payloads], identity.encode(),
                            batch.first_sequence)  # fmt: skip
    transactions.prepare(batch, records, 30)
    if point == "committed":
        transactions.commit(30)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
