"""The fault kit's network keeps test traffic on the machine: once a test's bridge and namespaces
are gone, a client still dialling its brokers meets the test range's `unreachable` route ("No
route to host" at once), never the default gateway. Root is needed, as CI has."""

from __future__ import annotations

import errno
import ipaddress
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from faultkit import (
    TEST_RANGE,
    FaultCluster,
    fault_cluster,
    poll,
    route_of,
)

from weir.cli.zookeeper import Installation


@pytest.fixture
def cluster(
    tmp_path: Path, zookeeper_installation: Installation, netns: None
) -> Iterator[FaultCluster]:
    with fault_cluster(tmp_path / "cluster", brokers=1) as started:
        yield started


def connect_error(address: str, port: int) -> tuple[int | None, float]:
    """The errno of a TCP connect to `address` (None if it connected) and how long it took."""
    started = time.monotonic()
    with socket.socket() as sock:
        sock.settimeout(5)
        try:
            sock.connect((address, port))
            code = None
        except OSError as exc:
            code = exc.errno
    return code, time.monotonic() - started


def test_a_dead_networks_addresses_are_unreachable_not_routed_away(cluster: FaultCluster) -> None:
    broker_ip, port = cluster.brokers[1].address
    assert route_of(broker_ip).startswith(f"{broker_ip} dev wf-")  # the live bridge's /24 wins
    errors: list[str] = []
    lock = threading.Lock()

    def on_error(error: KafkaError) -> None:
        with lock:
            errors.append(str(error))

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "error_cb": on_error,
                         "reconnect.backoff.max.ms": 200, "log_level": 0})  # fmt: skip
    try:
        cluster.create_topic("reachable", partitions=1, replication=1)
        producer.produce("reachable", b"while the network lives")
        assert producer.flush(30) == 0
        cluster.close()  # brokers, ZooKeeper, bridge and namespaces go; the producer stays

        route = route_of(broker_ip)  # the kernel's answer for the unreachable route
        assert route == "RTNETLINK answers: No route to host", route
        code, seconds = connect_error(broker_ip, port)
        assert code == errno.EHOSTUNREACH, (code, seconds)
        assert seconds < 1.0  # refused by the route at once, not a timeout waiting on a peer

        def client_saw_no_route() -> bool:
            producer.poll(0.2)
            with lock:
                return any("No route to host" in e for e in errors)

        poll(client_saw_no_route, 20, "the producer re-dialling and meeting no route")
        with lock:
            assert not any("Invalid response size" in e for e in errors), errors
    finally:
        producer.purge()
        producer.close()
    never_bridged = str(ipaddress.ip_network(TEST_RANGE)[-2])
    assert route_of(never_bridged) == "RTNETLINK answers: No route to host"
