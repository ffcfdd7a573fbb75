"""The agent's Prometheus endpoint, scraped over HTTP from a real agent process."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

from agent_process import AgentProcess, create_topic
from broker_process import BrokerProcess
from prometheus_client.parser import text_string_to_metric_families

from weir.agent.client import AgentClient
from weir.agent.event import Event


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.status == 200
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_metrics_count_what_the_agent_accepted_stored_refused_and_sent(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, "measured", 2)
    agent = AgentProcess(tmp_path / "agent", broker.bootstrap, "max_event_bytes = 1000\n",
                         args=("--metrics-port", "0"))  # fmt: skip
    agent.start()
    try:
        events = [Event(topic="measured", value=b"v%d" % i, key=b"k%d" % i) for i in range(10)]
        with AgentClient(agent.socket) as client:
            responses = client.send_all([*events, Event(topic="measured", value=b"x" * 2000)])
        assert [r.ok for r in responses] == [True] * 10 + [False]
        topic = (("topic", "measured"),)
        deadline = time.monotonic() + 60
        while True:
            samples = _scrape(agent.metrics_url())
            if samples.get(("weir_agent_sent_events_total", topic)) == 10 or (
                time.monotonic() > deadline
            ):
                break
            time.sleep(0.2)
    finally:
        agent.stop()
    assert samples[("weir_agent_sent_events_total", topic)] == 10
    assert samples[("weir_agent_accepted_events_total", topic)] == 11
    assert samples[("weir_agent_stored_events_total", topic)] == 10
    refused = (("reason", "EVENT_TOO_LARGE"), ("topic", "measured"))
    assert samples[("weir_agent_rejected_events_total", refused)] == 1
    assert samples[("weir_agent_cluster_reachable", ())] == 1
    depths = {k: v for k, v in samples.items() if k[0] == "weir_agent_queue_depth_events"}
    assert depths and all(v == 0 for v in depths.values())
    assert ("weir_agent_dropped_events_total", topic) in samples
    assert ("weir_agent_oldest_event_age_seconds", (("partition", "0"), *topic)) in samples
