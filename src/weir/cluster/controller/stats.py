"""What the controller counts for the broker's metrics (Kafka's ControllerStats and the
KafkaController gauges): leader elections, unclean ones among them, offline partitions, and
how long events wait in the controller's queue.

Thread-safety (docs/threads.md): written by the controller's event thread (the queue size by
the queue itself); the metrics snapshot reads the plain ints from the broker's loop, each read
whole (a scrape may see one event's counts half applied, never a torn number).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class ControllerStats:
    #: partitions given a new leader (Kafka's LeaderElectionRateAndTimeMs count)
    leader_elections: int = 0
    #: of those, leaders taken from outside the ISR (UncleanLeaderElectionsPerSec)
    unclean_leader_elections: int = 0
    #: partitions without a live leader, while this controller is active (OfflinePartitionsCount)
    offline_partitions: int = 0
    #: partitions the active controller knows (GlobalPartitionCount)
    partitions: int = 0
    #: events handled, and the nanoseconds they waited in the queue (EventQueueTimeMs)
    events: int = 0
    event_queue_ns: int = 0
