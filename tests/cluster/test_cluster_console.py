"""`weir console` on a three-broker cluster in racks a, b and c, read in headless Chromium: the
cluster page lists every broker with its host, port and rack and names the controller the
brokers agree on; a replicated topic's page shows each partition's replicas and ISR."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_brokers import (
    BrokerSet,
    ClusterBroker,
    create_topics,
    start_three,
    wait_same_everywhere,
)
from confluent_kafka.admin import AdminClient, NewTopic

from console_browser import ConsoleProcess, chromium, screenshot, watch

TOPIC = "replicated"
CONFIG = {"offsets.topic.num.partitions": 3}


@pytest.fixture
def cluster(zookeeper, cluster_brokers: BrokerSet) -> dict[int, ClusterBroker]:
    return start_three(cluster_brokers, zookeeper.connect, CONFIG)


@pytest.fixture
def console(cluster: dict[int, ClusterBroker], tmp_path: Path) -> Iterator[str]:
    bootstrap = ",".join(b.bootstrap for b in cluster.values())
    process = ConsoleProcess(bootstrap, "--refresh", "0", log=tmp_path / "console.log")
    yield process.url
    process.stop()
    assert "Traceback" not in process.logs(), process.logs()


def test_the_cluster_page_shows_brokers_racks_and_the_controller(
    cluster: dict[int, ClusterBroker], console: str
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster[1].bootstrap, "log_level": 0})
    create_topics(admin, NewTopic(TOPIC, num_partitions=3, replication_factor=3))
    wait_same_everywhere(cluster.values(), TOPIC, 3)
    controller = admin.describe_cluster(request_timeout=30).result().controller.id
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        problems = watch(page)
        assert page.goto(console + "/").status == 200
        screenshot(page, "console-cluster-of-three")
        rows = [r.locator("td").all_inner_texts() for r in page.locator("#brokers tbody tr").all()]
        assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
            (str(b.node_id), b.address[0], str(b.address[1]), rack)
            for b, rack in zip(cluster.values(), "abc", strict=True)
        ]
        assert [r[0] for r in rows if r[4] == "controller"] == [str(controller)]
        assert f"broker {controller}" in page.locator(".facts").inner_text()

        assert page.goto(console + f"/topics/{TOPIC}").status == 200
        partitions = [_cells(r) for r in page.locator("#partitions tbody tr").all()]
        assert len(partitions) == 3
        assert all(sorted(p[2].split(",")) == ["1", "2", "3"] for p in partitions)
        assert all(sorted(p[3].split(",")) == ["1", "2", "3"] for p in partitions)
        assert problems == []


def _cells(row: Any) -> list[str]:
    return [text.strip() for text in row.locator("td").all_inner_texts()]
