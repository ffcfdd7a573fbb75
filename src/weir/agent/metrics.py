"""The agent's Prometheus metrics, read from the agent at each scrape (no cost per event).

Served at `http://HOST:PORT/metrics` when the agent is given `metrics_port`
(`weir agent start --metrics-port N`; 0 picks a free port, printed at start):

    weir_agent_accepted_events_total{topic}           events offered by callers and tailed files
    weir_agent_stored_events_total{topic}             stored per the topic's class (caller answered)
    weir_agent_rejected_events_total{topic,reason}    refused with an error (reason: the error code)
    weir_agent_sent_events_total{topic}               acknowledged by the cluster
    weir_agent_dropped_events_total{topic}            overwritten in full `logs` queues
    weir_agent_spilled_events_total{topic}            written to disk by `memory`/`shm` queues
    weir_agent_dead_lettered_events_total{topic}      refused for good by the cluster (no topic)
    weir_agent_pending_events{topic}                  waiting for the topic's partition count
    weir_agent_queue_depth_events{topic,partition,durability}
    weir_agent_queue_bytes{topic,partition,durability}
    weir_agent_oldest_event_age_seconds{topic,partition}
    weir_agent_cluster_reachable                      1 while the cluster answers
    weir_agent_tailed_lines_total                     lines read from tailed files

Accepted, stored, rejected, sent and dead-lettered count since the agent started; dropped and
spilled since the queue was created (they live with the queue).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from weir.agent.agent import Agent


class AgentCollector(Collector):
    """Turns the agent's counters and queue states into metric families at scrape time."""

    def __init__(self, agent: Agent) -> None:
        self._agent = agent

    def collect(self) -> Iterator[Metric]:
        yield from self._topic_counters()
        yield from self._queue_gauges()
        reachable = GaugeMetricFamily(
            "weir_agent_cluster_reachable", "1 while the cluster answers the agent"
        )
        reachable.add_metric([], 1.0 if self._agent.cluster_reachable else 0.0)
        yield reachable
        tailed = CounterMetricFamily("weir_agent_tailed_lines", "lines read from tailed files")
        tailed.add_metric([], self._agent.tailer.lines_read if self._agent.tailer else 0)
        yield tailed

    def _topic_counters(self) -> Iterator[Metric]:
        accepted, stored, rejected = self._agent.counts.snapshot()
        per_queue: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for queue in self._agent.queue_statuses():
            per_queue["sent"][queue.topic] += queue.sent
            per_queue["dropped"][queue.topic] += queue.dropped
            per_queue["spilled"][queue.topic] += queue.spilled
        families = {
            "accepted": (accepted, "events offered to the agent"),
            "stored": (stored, "events stored per the topic's durability class"),
            "sent": (per_queue["sent"], "events acknowledged by the cluster"),
            "dropped": (per_queue["dropped"], "events overwritten in full logs queues"),
            "spilled": (per_queue["spilled"], "events spilled to disk by memory queues"),
            "dead_lettered": (
                self._agent.pending.dead_letters.counts(),
                "events put in the dead-letter directory",
            ),
        }
        for name, (values, documentation) in families.items():
            family = CounterMetricFamily(
                f"weir_agent_{name}_events", documentation, labels=["topic"]
            )
            for topic, value in sorted(values.items()):
                family.add_metric([topic], value)
            yield family
        refused = CounterMetricFamily(
            "weir_agent_rejected_events", "events refused with an error", labels=["topic", "reason"]
        )
        for (topic, reason), value in sorted(rejected.items()):
            refused.add_metric([topic, reason], value)
        yield refused

    def _queue_gauges(self) -> Iterator[Metric]:
        labels = ["topic", "partition", "durability"]
        depth = GaugeMetricFamily("weir_agent_queue_depth_events", "events queued", labels=labels)
        size = GaugeMetricFamily("weir_agent_queue_bytes", "bytes queued", labels=labels)
        age = GaugeMetricFamily(
            "weir_agent_oldest_event_age_seconds",
            "age of the oldest queued event",
            labels=["topic", "partition"],
        )
        for queue in self._agent.queue_statuses():
            names = [queue.topic, str(queue.partition), queue.durability]
            depth.add_metric(names, queue.depth)
            size.add_metric(names, queue.bytes)
            age.add_metric(names[:2], queue.oldest_age_ms / 1000)
        pending = GaugeMetricFamily(
            "weir_agent_pending_events",
            "events waiting for their topic's partition count",
            labels=["topic"],
        )
        for topic in self._agent.pending.statuses():
            pending.add_metric([topic["topic"]], topic["depth"])
        yield from (depth, size, age, pending)


def serve_metrics(agent: Agent, host: str, port: int) -> WSGIServer:
    """Serve the agent's metrics in a background thread; returns the server (`server_port`)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(agent))
    server, _thread = start_http_server(port, host, registry=registry)
    return server
