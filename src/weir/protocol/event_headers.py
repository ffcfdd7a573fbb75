"""The record headers by which weir names an event for good, whoever reads it.

The agent writes both on every record of its durable queues (`weir.agent.exactly_once`); the log
ETL deduplicates on them (`weir.pipeline.dedupe`). Kept below both so that they share one
definition.

- `weir.agent`: the agent's identity, a random id kept in its spool (a new spool is a new agent).
- `weir.pos`: the event's position in its queue's ring, in decimal ASCII. A queue feeds one
  topic-partition, and its positions only grow, so within a partition the events of one agent
  first appear in rising position order; a record whose position does not rise above the
  highest one seen before is a copy.
"""

from __future__ import annotations

AGENT_HEADER = "weir.agent"
POSITION_HEADER = "weir.pos"
