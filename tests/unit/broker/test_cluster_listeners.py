"""Brokers with several listeners in a cluster, on the controller's requests alone: UpdateMetadata
carries every endpoint with Kafka's security protocol numbers, LeaderAndIsr names live leaders
by their inter-broker address, and a broker's metadata cache gives peers the inter-broker
address and clients the address of their own listener."""

from __future__ import annotations

from weir.broker.cluster_node import MetadataCache
from weir.cluster.requests import leader_and_isr_request, update_metadata_request
from weir.cluster.znodes import BrokerEndpoint, BrokerRegistration

BROKERS = [
    BrokerRegistration(
        node_id=node_id,
        host=f"10.0.0.{node_id}",
        port=9093,
        endpoints=(
            BrokerEndpoint("INTERNAL", "SSL", f"10.0.0.{node_id}", 9093),
            BrokerEndpoint("CLIENT", "SASL_SSL", f"kafka-{node_id}.example.com", 9094),
        ),
    )
    for node_id in (1, 2)
]


def test_update_metadata_carries_every_listener() -> None:
    request = update_metadata_request(1, 1, 5, [], BROKERS)
    endpoints = [(e.listener, e.security_protocol, e.host, e.port)
                 for e in request.live_brokers[1].endpoints]  # fmt: skip
    assert endpoints == [
        ("INTERNAL", 1, "10.0.0.2", 9093),
        ("CLIENT", 3, "kafka-2.example.com", 9094),
    ]


def test_live_leaders_are_named_by_their_inter_broker_address() -> None:
    request = leader_and_isr_request(1, 1, 5, [], BROKERS, listener="CLIENT")
    assert [(b.host_name, b.port) for b in request.live_leaders] == [
        ("kafka-1.example.com", 9094),
        ("kafka-2.example.com", 9094),
    ]


def test_the_cache_gives_peers_and_clients_their_own_listeners_address() -> None:
    cache = MetadataCache("INTERNAL")
    cache.apply(update_metadata_request(1, 1, 5, [], BROKERS))
    broker = cache.brokers[2]
    assert (broker.host, broker.port) == ("10.0.0.2", 9093)
    client_view = broker.on_listener("CLIENT")
    assert client_view is not None
    assert (client_view.host, client_view.port) == ("kafka-2.example.com", 9094)
    assert broker.on_listener("PLAINTEXT") is None
