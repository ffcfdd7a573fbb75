"""The JSON in each znode: round trips, Kafka's shapes, znodes Kafka itself wrote, strict parsing.

The literal documents below follow Kafka 3.x's `kafka.zk.ZkData` (BrokerIdZNode, TopicZNode,
TopicPartitionStateZNode, ControllerZNode, ControllerEpochZNode, ConfigEntityZNode,
ConfigEntityChangeNotificationSequenceZNode, ClusterIdZNode, ProducerIdBlockZNode).
"""

from __future__ import annotations

import json
import re
import string
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weir.cluster.znodes import (
    BrokerEndpoint,
    BrokerRegistration,
    PartitionState,
    TopicAssignment,
    ZnodeFormatError,
    encode_assignment,
    encode_broker,
    encode_cluster_id,
    encode_config_change,
    encode_controller,
    encode_entity_config,
    encode_entity_config_change,
    encode_producer_block,
    encode_reassignment,
    encode_state,
    encode_topic_config,
    encode_user_config,
    encode_user_config_change,
    entity_config_path,
    parse_assignment,
    parse_broker,
    parse_change_entity,
    parse_cluster_id,
    parse_config_change,
    parse_controller,
    parse_controller_epoch,
    parse_entity_config,
    parse_producer_block_end,
    parse_reassignment,
    parse_state,
    parse_topic_config,
    parse_topic_id,
    parse_user_config,
    topic_id_text,
    user_config_path,
)

#: java.util.Base64.getUrlEncoder()'s alphabet, by index
URL_SAFE_ALPHABET = string.ascii_uppercase + string.ascii_lowercase + string.digits + "-_"
TOPIC_ID_TEXT = re.compile(r"[A-Za-z0-9_-]{22}")
TOPIC_ID = uuid.UUID("4a1f7c2e-9b3d-4e5f-8a6b-1c2d3e4f5a6b")


def document(data: bytes) -> Any:
    return json.loads(data)


def kafka_json(value: Any) -> bytes:
    """A document as Kafka's Jackson writes it: compact, keys in no particular order."""
    return json.dumps(value, separators=(",", ":")).encode()


# ---- topic ids: Kafka's Uuid text form ---------------------------------------------------------


def uuid_text_by_hand(value: uuid.UUID) -> str:
    """Base64 without a base64 library: the 128 bits, padded with 4 zero bits, in 6-bit digits."""
    bits = value.int << 4
    return "".join(URL_SAFE_ALPHABET[(bits >> shift) & 0x3F] for shift in range(126, -1, -6))


@pytest.mark.parametrize(
    ("value", "text"),
    [
        pytest.param(uuid.UUID(int=0), "AAAAAAAAAAAAAAAAAAAAAA", id="Uuid.ZERO_UUID"),
        pytest.param(uuid.UUID(int=1), "AAAAAAAAAAAAAAAAAAAAAQ", id="Uuid.METADATA_TOPIC_ID"),
        pytest.param(uuid.UUID(bytes=b"\xff" * 16), "_____________________w", id="underscore"),
        pytest.param(uuid.UUID(bytes=b"\xfb\xef\xbe" * 5 + b"\xfb"), "-" * 21 + "w", id="dash"),
    ],
)
def test_topic_id_text_is_kafkas_uuid_string(value: uuid.UUID, text: str) -> None:
    assert topic_id_text(value) == text
    assert parse_topic_id(text) == value


@settings(max_examples=200, deadline=None)
@given(value=st.uuids(version=None))
def test_topic_id_text_is_url_safe_unpadded_base64(value: uuid.UUID) -> None:
    text = topic_id_text(value)
    assert TOPIC_ID_TEXT.fullmatch(text)
    assert text == uuid_text_by_hand(value)
    assert parse_topic_id(text) == value


@settings(max_examples=200, deadline=None)
@given(
    body=st.text(alphabet=URL_SAFE_ALPHABET, min_size=21, max_size=21),
    # the 22nd digit carries 2 bits and 4 zero bits: A, Q, g or w
    last=st.sampled_from("AQgw"),
)
def test_every_canonical_topic_id_text_survives_a_round_trip(body: str, last: str) -> None:
    assert topic_id_text(parse_topic_id(body + last)) == body + last


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("AAAAAAAAAAAAAAAAAAAAA", id="21-chars"),
        pytest.param("AAAAAAAAAAAAAAAAAAAAAAAA", id="24-chars-18-bytes"),
        pytest.param("AAAAAAAAAAA AAAAAAAAAAA", id="inner-space"),
        pytest.param("AAAAAAAAAAAAAAAAAAAAAA\n", id="trailing-newline"),
        pytest.param(str(TOPIC_ID), id="hex-uuid-form"),
    ],
)
def test_a_bad_topic_id_is_a_format_error(text: str) -> None:
    with pytest.raises(ZnodeFormatError, match="is not a base64 Uuid"):
        parse_topic_id(text)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("AAAAAAAAAAAAAAAAAAAA+/", id="standard-alphabet"),
        pytest.param("AAAAAAAAAAAAAAAAAAAAAA!!!!", id="trailing-junk"),
        pytest.param("AAAAAAAAAAAAAAAAAAAAAA==AAAA", id="data-after-padding"),
    ],
)
def test_a_topic_id_outside_kafkas_url_safe_alphabet_is_a_format_error(text: str) -> None:
    with pytest.raises(ZnodeFormatError):
        parse_topic_id(text)


# ---- /brokers/ids/N ----------------------------------------------------------------------------


def test_broker_registration_has_kafkas_version_5_shape() -> None:
    registration = BrokerRegistration(node_id=3, host="kafka-3.example.com", port=9092, rack="r1")
    assert document(encode_broker(registration, 1710691902130)) == {
        "version": 5,
        "host": "kafka-3.example.com",
        "port": 9092,
        "endpoints": ["PLAINTEXT://kafka-3.example.com:9092"],
        "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
        "jmx_port": -1,
        "rack": "r1",
        "features": {},
        "timestamp": "1710691902130",
    }


hosts = st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,40}[a-z0-9])?", fullmatch=True) | st.sampled_from(
    ["127.0.0.1", "::1", "fe80::1%eth0"]
)


@settings(max_examples=100, deadline=None)
@given(
    node_id=st.integers(0, 2**31 - 1),
    host=hosts,
    port=st.integers(1, 65535),
    rack=st.none() | st.text(min_size=1, max_size=20),
    epoch=st.integers(-1, 2**63 - 1),
)
def test_broker_registration_round_trip(
    node_id: int, host: str, port: int, rack: str | None, epoch: int
) -> None:
    registration = BrokerRegistration(node_id=node_id, host=host, port=port, rack=rack)
    parsed = parse_broker(node_id, encode_broker(registration, 0), epoch)
    assert parsed == BrokerRegistration(
        node_id=node_id, host=host, port=port, rack=rack, epoch=epoch
    )


def test_a_broker_registration_written_by_kafka_3() -> None:
    data = kafka_json({
        "features": {"metadata.version": {"min_version": 1, "max_version": 7}},
        "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
        "endpoints": ["PLAINTEXT://kafka-1.example.com:9092"],
        "jmx_port": 9999,
        "port": 9092,
        "host": "kafka-1.example.com",
        "version": 5,
        "timestamp": "1710691902130",
        "rack": "eu-west-1a",
    })  # fmt: skip
    assert parse_broker(1, data, epoch=4294967321) == BrokerRegistration(
        node_id=1, host="kafka-1.example.com", port=9092, rack="eu-west-1a", epoch=4294967321
    )


def test_a_kafka_broker_with_a_plaintext_listener_first_and_no_rack() -> None:
    data = kafka_json({
        "features": {},
        "listener_security_protocol_map": {"INTERNAL": "PLAINTEXT", "EXTERNAL": "SSL"},
        "endpoints": ["INTERNAL://10.0.0.5:9092", "EXTERNAL://broker.example.com:9094"],
        "jmx_port": -1,
        "port": 9092,
        "host": "10.0.0.5",
        "version": 5,
        "timestamp": "1620732279919",
    })  # fmt: skip
    assert parse_broker(2, data) == BrokerRegistration(
        node_id=2,
        host="10.0.0.5",
        port=9092,
        endpoints=(
            BrokerEndpoint("INTERNAL", "PLAINTEXT", "10.0.0.5", 9092),
            BrokerEndpoint("EXTERNAL", "SSL", "broker.example.com", 9094),
        ),
    )


def test_a_kafka_broker_whose_first_listener_is_ssl_is_reached_on_its_plaintext_one() -> None:
    data = kafka_json({
        "features": {},
        "listener_security_protocol_map": {"SSL": "SSL", "PLAINTEXT": "PLAINTEXT"},
        "endpoints": ["SSL://kafka-1.example.com:9093", "PLAINTEXT://kafka-1.example.com:9092"],
        "jmx_port": -1,
        "port": 9092,
        "host": "kafka-1.example.com",
        "version": 5,
        "timestamp": "1620732279919",
    })  # fmt: skip
    assert parse_broker(1, data).port == 9092


def test_a_bracketed_ipv6_endpoint_loses_its_brackets() -> None:
    # Kafka's EndPoint.connectionString brackets IPv6 hosts (Utils.formatAddress).
    data = b'{"version":5,"host":null,"port":-1,"endpoints":["PLAINTEXT://[fe80::1]:9092"]}'
    parsed = parse_broker(5, data)
    assert (parsed.host, parsed.port) == ("fe80::1", 9092)


def test_a_legacy_registration_without_endpoints_uses_host_and_port() -> None:
    data = b'{"version":1,"host":"old.example.com","port":9092,"jmx_port":-1}'
    parsed = parse_broker(0, data)
    assert (parsed.host, parsed.port, parsed.rack) == ("old.example.com", 9092, None)


# ---- /brokers/topics/T -------------------------------------------------------------------------


def test_topic_assignment_has_kafkas_version_3_shape() -> None:
    assignment = TopicAssignment(
        name="orders", topic_id=TOPIC_ID, partitions={1: (2, 3), 0: (1, 2)}
    )
    written = document(encode_assignment(assignment))
    assert written == {
        "version": 3,
        "topic_id": topic_id_text(TOPIC_ID),
        "partitions": {"0": [1, 2], "1": [2, 3]},
        "adding_replicas": {},
        "removing_replicas": {},
    }
    assert TOPIC_ID_TEXT.fullmatch(written["topic_id"])


replica_lists = st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=5, unique=True)


@settings(max_examples=100, deadline=None)
@given(
    topic_id=st.uuids(),
    replicas=st.lists(replica_lists.map(tuple), min_size=1, max_size=12),
)
def test_topic_assignment_round_trip(topic_id: uuid.UUID, replicas: list[tuple[int, ...]]) -> None:
    assignment = TopicAssignment(name="t", topic_id=topic_id, partitions=dict(enumerate(replicas)))
    assert parse_assignment("t", encode_assignment(assignment)) == assignment


def test_a_topic_assignment_written_by_kafka_3() -> None:
    data = kafka_json({
        "partitions": {"2": [3, 1], "0": [1, 2], "1": [4, 2, 3]},
        "topic_id": "vNTm5EvWQ6SVeIiZKBzQTw",
        "adding_replicas": {"1": [4]},
        "removing_replicas": {"1": [3]},
        "version": 3,
    })  # fmt: skip
    parsed = parse_assignment("orders", data)
    assert parsed.name == "orders"
    assert topic_id_text(parsed.topic_id) == "vNTm5EvWQ6SVeIiZKBzQTw"
    assert dict(parsed.partitions) == {0: (1, 2), 1: (4, 2, 3), 2: (3, 1)}
    assert (dict(parsed.adding), dict(parsed.removing)) == ({1: (4,)}, {1: (3,)})
    assert parse_assignment("orders", encode_assignment(parsed)) == parsed


def test_a_reassignment_request_round_trips_and_bad_ones_are_refused() -> None:
    targets = {("orders", 1): (4, 2), ("a", 0): (1,)}
    assert parse_reassignment(encode_reassignment(targets)) == targets
    for bad in (b"{}", b'{"partitions": [{"partition": 0, "replicas": [1]}]}',
                b'{"partitions": [{"topic": "a", "partition": 0, "replicas": "1"}]}'):
        with pytest.raises(ZnodeFormatError):
            parse_reassignment(bad)


# ---- /brokers/topics/T/partitions/P/state ------------------------------------------------------


def test_partition_state_has_exactly_kafkas_fields() -> None:
    state = PartitionState(leader=2, leader_epoch=5, isr=(2, 3, 1), controller_epoch=9)
    assert document(encode_state(state)) == {
        "controller_epoch": 9,
        "leader": 2,
        "leader_epoch": 5,
        "isr": [2, 3, 1],
        "version": 1,
    }


@settings(max_examples=100, deadline=None)
@given(
    leader=st.integers(-1, 2**31 - 1),
    leader_epoch=st.integers(0, 2**31 - 1),
    isr=replica_lists.map(tuple),
    controller_epoch=st.integers(0, 2**31 - 1),
)
def test_partition_state_round_trip(
    leader: int, leader_epoch: int, isr: tuple[int, ...], controller_epoch: int
) -> None:
    state = PartitionState(
        leader=leader, leader_epoch=leader_epoch, isr=isr, controller_epoch=controller_epoch
    )
    assert parse_state("t", 0, encode_state(state)) == state


def test_partition_states_written_by_kafka() -> None:
    led = b'{"controller_epoch":3,"leader":2,"version":1,"leader_epoch":5,"isr":[2,3,1]}'
    assert parse_state("orders", 0, led) == PartitionState(
        leader=2, leader_epoch=5, isr=(2, 3, 1), controller_epoch=3
    )
    offline = b'{"controller_epoch":3,"leader":-1,"version":1,"leader_epoch":6,"isr":[1]}'
    assert parse_state("orders", 1, offline).leader == -1


# ---- /controller and /controller_epoch ---------------------------------------------------------


def test_controller_round_trip_and_shape() -> None:
    data = encode_controller(4, 1620732280197)
    assert document(data) == {"version": 2, "brokerid": 4, "timestamp": "1620732280197"}
    assert parse_controller(data) == 4


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b'{"version":1,"brokerid":2,"timestamp":"1620732280197"}', id="kafka-3.0"),
        pytest.param(
            b'{"version":2,"brokerid":2,"timestamp":"1620732280197","kraftControllerEpoch":-1}',
            id="kafka-3.4",
        ),
    ],
)
def test_a_controller_written_by_kafka(data: bytes) -> None:
    assert parse_controller(data) == 2


@pytest.mark.parametrize(("data", "epoch"), [(b"0", 0), (b"12", 12), (b"2147483647", 2**31 - 1)])
def test_controller_epoch_is_plain_decimal_text(data: bytes, epoch: int) -> None:
    # Kafka's ControllerEpochZNode: epoch.toString.getBytes(UTF_8), not JSON
    assert parse_controller_epoch(data) == epoch


# ---- /config/topics/T and /config/changes ------------------------------------------------------


def test_topic_config_round_trip_and_shape() -> None:
    configs = {"retention.ms": "86400000", "cleanup.policy": "compact"}
    data = encode_topic_config(configs)
    assert document(data) == {"version": 1, "config": configs}
    assert parse_topic_config("t", data) == configs


def test_a_topic_config_written_by_kafka() -> None:
    data = b'{"version":1,"config":{"min.insync.replicas":"2","retention.bytes":"-1"}}'
    assert parse_topic_config("t", data) == {"min.insync.replicas": "2", "retention.bytes": "-1"}
    assert parse_topic_config("t", b'{"version":1,"config":{}}') == {}


def test_config_change_round_trip_and_shape() -> None:
    data = encode_config_change("orders")
    assert document(data) == {"version": 2, "entity_path": "topics/orders"}
    assert parse_config_change(data) == "orders"


@pytest.mark.parametrize(
    "entity_path",
    ["brokers/1", "brokers/<default>", "clients/app-1", "users/alice/clients/app-1", "ips/1.2.3.4"],
)
def test_a_config_change_for_another_entity_is_none(entity_path: str) -> None:
    assert parse_config_change(kafka_json({"version": 2, "entity_path": entity_path})) is None


# ---- /cluster/id and /latest_producer_id_block -------------------------------------------------


def test_cluster_id_round_trip_and_shape() -> None:
    data = encode_cluster_id("lkj2DrsZS4WfFnJIbAcM5w")
    assert document(data) == {"version": "1", "id": "lkj2DrsZS4WfFnJIbAcM5w"}
    assert parse_cluster_id(data) == "lkj2DrsZS4WfFnJIbAcM5w"
    assert parse_cluster_id(b'{"version":"1","id":"Ae3cJdXkT7qxFx2NzOZyBQ"}') == (
        "Ae3cJdXkT7qxFx2NzOZyBQ"
    )


def test_producer_block_round_trip_and_shape() -> None:
    data = encode_producer_block(2, 2000, 2999)
    assert document(data) == {
        "version": 1,
        "broker": 2,
        "block_start": "2000",
        "block_end": "2999",
    }
    assert parse_producer_block_end(data) == 2999
    written_by_kafka = b'{"version":1,"broker":0,"block_start":"0","block_end":"999"}'
    assert parse_producer_block_end(written_by_kafka) == 999


@pytest.mark.parametrize("data", [None, b""], ids=["no-znode", "empty-znode"])
def test_no_producer_block_yet_is_minus_one(data: bytes | None) -> None:
    assert parse_producer_block_end(data) == -1


# ---- strict parsing ----------------------------------------------------------------------------

STATE = "/brokers/topics/t/partitions/0/state"


def assignment_data(partitions: str) -> bytes:
    return ('{"topic_id":"AAAAAAAAAAAAAAAAAAAAAQ","partitions":' + partitions + "}").encode()


parse_t_state = partial(parse_state, "t", 0)
parse_t_assignment = partial(parse_assignment, "t")
parse_t_config = partial(parse_topic_config, "t")
parse_broker_7 = partial(parse_broker, 7)

# fmt: off
MALFORMED = [
    # not a JSON object
    pytest.param(parse_t_state, None, f"^{STATE}: not JSON", id="state-no-data"),
    pytest.param(parse_t_state, b"{leader: 1}", f"^{STATE}: not JSON", id="state-not-json"),
    pytest.param(parse_t_state, b"\xff\xfe{", f"^{STATE}: not JSON", id="state-not-utf8"),
    pytest.param(parse_t_state, b"[1, 2]", "expected a JSON object, got list", id="state-array"),
    pytest.param(parse_controller, b"7", "^/controller: expected a JSON object, got int",
                 id="controller-bare-number"),
    pytest.param(parse_broker_7, b"", "^/brokers/ids/7: not JSON", id="broker-empty"),
    pytest.param(parse_t_assignment, b'"orders"', "got str", id="assignment-string"),
    pytest.param(parse_t_config, b"null", "got NoneType", id="config-null"),
    pytest.param(parse_config_change, b"[]", "^/config/changes: expected a JSON object",
                 id="change-array"),
    pytest.param(parse_cluster_id, b"abc", "^/cluster/id: not JSON", id="cluster-id-not-json"),
    pytest.param(parse_producer_block_end, b"[]", "^/latest_producer_id_block: expected",
                 id="producer-block-array"),
    # missing fields
    pytest.param(parse_t_state, b'{"leader":1,"leader_epoch":0,"isr":[1]}',
                 "'controller_epoch' is not an integer: None", id="state-no-controller-epoch"),
    pytest.param(parse_t_state, b'{"leader":1,"leader_epoch":0,"controller_epoch":1}',
                 "expected a list of broker ids, got None", id="state-no-isr"),
    pytest.param(parse_controller, b'{"version":2}', "'brokerid' is not an integer: None",
                 id="controller-no-brokerid"),
    pytest.param(parse_broker_7, b'{"version":5,"jmx_port":-1}',
                 r"^/brokers/ids/7: no endpoint \(host and port\)", id="broker-no-endpoint"),
    pytest.param(parse_broker_7, b'{"host":null,"port":-1,"endpoints":["PLAINTEXT://:9092"]}',
                 "no endpoint", id="broker-endpoint-without-host"),
    pytest.param(parse_t_assignment, b'{"partitions":{"0":[1]}}',
                 "^/brokers/topics/t: no topic_id", id="assignment-no-topic-id"),
    pytest.param(parse_t_assignment, b'{"topic_id":"AAAAAAAAAAAAAAAAAAAAAQ"}',
                 "^/brokers/topics/t: no partitions", id="assignment-no-partitions"),
    pytest.param(parse_t_assignment, assignment_data('{}'),
                 "no partitions", id="assignment-zero-partitions"),
    pytest.param(parse_config_change, b'{"version":2}', "^/config/changes: no entity_path",
                 id="change-no-entity-path"),
    pytest.param(parse_config_change, b'{"version":1,"entity_type":"topics","entity_name":"t"}',
                 "no entity_path", id="change-version-1"),
    pytest.param(parse_cluster_id, b'{"version":"1"}', "^/cluster/id: no id", id="cluster-no-id"),
    pytest.param(parse_cluster_id, b'{"version":"1","id":""}', "no id", id="cluster-empty-id"),
    pytest.param(parse_producer_block_end, b'{"version":1,"broker":0,"block_start":"0"}',
                 "no block_end", id="producer-block-no-end"),
    pytest.param(parse_producer_block_end, b'{"block_end":"lots"}', "no block_end",
                 id="producer-block-end-not-a-number"),
    # bool where an int is expected (JSON true is an int to Python)
    pytest.param(parse_t_state, b'{"leader":true,"leader_epoch":0,"isr":[1],"controller_epoch":1}',
                 "'leader' is not an integer: True", id="state-bool-leader"),
    pytest.param(parse_t_state,
                 b'{"leader":1,"leader_epoch":0,"isr":[1,false],"controller_epoch":1}',
                 r"expected a list of broker ids, got \[1, False\]", id="state-bool-in-isr"),
    pytest.param(parse_t_state, b'{"leader":1,"leader_epoch":1.0,"isr":[1],"controller_epoch":1}',
                 "'leader_epoch' is not an integer: 1.0", id="state-float-epoch"),
    pytest.param(parse_t_state, b'{"leader":"1","leader_epoch":0,"isr":[1],"controller_epoch":1}',
                 "'leader' is not an integer: '1'", id="state-string-leader"),
    pytest.param(parse_controller, b'{"brokerid":true}', "'brokerid' is not an integer: True",
                 id="controller-bool"),
    pytest.param(parse_broker_7, b'{"host":"h","port":true}', "no endpoint", id="broker-bool-port"),
    pytest.param(parse_t_assignment, assignment_data('{"0":[true]}'),
                 "partition 0: expected a list of broker ids", id="assignment-bool-replica"),
    # partitions not numbered 0..n-1, replica lists empty or not lists
    pytest.param(parse_t_assignment, assignment_data('{"0":[1],"2":[1]}'),
                 r"partitions are not numbered 0\.\.1", id="assignment-gap"),
    pytest.param(parse_t_assignment, assignment_data('{"1":[1]}'),
                 r"partitions are not numbered 0\.\.0", id="assignment-no-partition-0"),
    pytest.param(parse_t_assignment, assignment_data('{"-1":[1]}'),
                 "partition '-1' is not a number", id="assignment-negative"),
    pytest.param(parse_t_assignment, assignment_data('{"p0":[1]}'),
                 "partition 'p0' is not a number", id="assignment-named-partition"),
    pytest.param(parse_t_assignment, assignment_data('{"0":[]}'),
                 "partition 0 has no replicas", id="assignment-empty-replicas"),
    pytest.param(parse_t_assignment, assignment_data('{"0":1}'),
                 "expected a list of broker ids, got 1", id="assignment-replicas-not-list"),
    pytest.param(parse_t_assignment, assignment_data('[[1]]'),
                 "no partitions", id="assignment-partitions-array"),
    # a bad topic id
    pytest.param(parse_t_assignment, b'{"topic_id":"not-a-uuid","partitions":{"0":[1]}}',
                 "topic id 'not-a-uuid' is not a base64 Uuid", id="assignment-bad-topic-id"),
    pytest.param(parse_t_assignment, b'{"topic_id":7,"partitions":{"0":[1]}}', "no topic_id",
                 id="assignment-numeric-topic-id"),
    # a config with non-string values
    pytest.param(parse_t_config, b'{"version":1,"config":{"retention.ms":86400000}}',
                 "^/config/topics/t: config is not an object of strings", id="config-int-value"),
    pytest.param(parse_t_config, b'{"version":1,"config":{"compact":true}}',
                 "not an object of strings", id="config-bool-value"),
    pytest.param(parse_t_config, b'{"version":1,"config":{"a":null}}',
                 "not an object of strings", id="config-null-value"),
    pytest.param(parse_t_config, b'{"version":1,"config":["a=b"]}',
                 "not an object of strings", id="config-array"),
    # a rack that is not a string
    pytest.param(parse_broker_7, b'{"host":"h","port":1,"rack":3}', "rack is not a string: 3",
                 id="broker-numeric-rack"),
    # a non-numeric controller epoch
    pytest.param(parse_controller_epoch, None, "^/controller_epoch: None is not a number",
                 id="controller-epoch-no-data"),
    pytest.param(parse_controller_epoch, b"", "is not a number", id="controller-epoch-empty"),
    pytest.param(parse_controller_epoch, b"seven", r"b'seven' is not a number",
                 id="controller-epoch-word"),
    pytest.param(parse_controller_epoch, b'{"epoch":7}', "is not a number",
                 id="controller-epoch-json"),
    pytest.param(parse_controller_epoch, b"7.0", "is not a number", id="controller-epoch-float"),
    pytest.param(parse_controller_epoch, b"\xff", "is not a number",
                 id="controller-epoch-not-utf8"),
]
# fmt: on


@pytest.mark.parametrize(("parse", "data", "message"), MALFORMED)
def test_a_malformed_znode_is_a_format_error_that_says_what_is_wrong(
    parse: Callable[[bytes | None], object], data: bytes | None, message: str
) -> None:
    with pytest.raises(ZnodeFormatError, match=message):
        parse(data)


# fmt: off
LENIENT = [
    pytest.param(parse_broker_7, b'{"endpoints":["PLAINTEXT://h:\xc2\xb2"]}',
                 id="endpoint-port-superscript-two"),
    pytest.param(parse_t_assignment, assignment_data('{"\u00b2":[1]}'),
                 id="partition-superscript-two"),
]
# fmt: on


@pytest.mark.parametrize(("parse", "data"), LENIENT)
def test_a_non_decimal_digit_is_a_format_error(
    parse: Callable[[bytes | None], object], data: bytes
) -> None:
    with pytest.raises(ZnodeFormatError):
        parse(data)


def test_a_bool_producer_block_end_is_a_format_error() -> None:
    with pytest.raises(ZnodeFormatError):
        parse_producer_block_end(b'{"version":1,"broker":0,"block_start":"0","block_end":true}')


@pytest.mark.parametrize("data", [b"1_000", b" 7\n"], ids=["underscore", "whitespace"])
def test_a_controller_epoch_kafka_would_reject_is_a_format_error(data: bytes) -> None:
    with pytest.raises(ZnodeFormatError):
        parse_controller_epoch(data)


# ---- several listeners, and users' SCRAM credentials -------------------------------------------


def test_a_broker_with_secured_listeners_only_registers_as_kafka_does() -> None:
    endpoints = (
        BrokerEndpoint("CLIENT", "SASL_SSL", "kafka-1.example.com", 9094),
        BrokerEndpoint("INTERNAL", "SSL", "10.0.0.1", 9093),
    )
    registration = BrokerRegistration(
        node_id=1, host="kafka-1.example.com", port=9094, endpoints=endpoints
    )
    written = document(encode_broker(registration, 0))
    assert (written["host"], written["port"]) == (None, -1)  # no PLAINTEXT listener
    assert written["endpoints"] == ["CLIENT://kafka-1.example.com:9094", "INTERNAL://10.0.0.1:9093"]
    assert written["listener_security_protocol_map"] == {"CLIENT": "SASL_SSL", "INTERNAL": "SSL"}
    parsed = parse_broker(1, encode_broker(registration, 0))
    assert parsed.endpoints == endpoints
    assert parsed.address("INTERNAL") == ("10.0.0.1", 9093)
    assert parsed.address("PLAINTEXT") is None


def test_a_users_scram_credentials_have_kafkas_layout() -> None:
    text = "salt=c2FsdA==,stored_key=c3RvcmVk,server_key=c2VydmVy,iterations=4096"
    assert user_config_path("alice") == "/config/users/alice"
    assert user_config_path("CN=alice, O=*") == "/config/users/CN%3Dalice%2C%20O%3D%2A"
    assert document(encode_user_config({"SCRAM-SHA-512": text})) == {
        "version": 1,
        "config": {"SCRAM-SHA-512": text},
    }
    assert parse_user_config("alice", encode_user_config({"SCRAM-SHA-512": text})) == {
        "SCRAM-SHA-512": text
    }
    notice = encode_user_config_change("CN=alice, O=*")
    assert document(notice) == {"version": 2, "entity_path": "users/CN%3Dalice%2C%20O%3D%2A"}
    assert parse_change_entity(notice) == ("users", "CN=alice, O=*")
    assert parse_config_change(notice) is None  # not a topic's


def test_dynamic_broker_configs_have_kafkas_layout() -> None:
    assert entity_config_path("brokers", "1") == "/config/brokers/1"
    assert entity_config_path("brokers", "<default>") == "/config/brokers/<default>"
    data = encode_entity_config({"log.retention.ms": "60000"})
    assert document(data) == {"version": 1, "config": {"log.retention.ms": "60000"}}
    assert parse_entity_config("/config/brokers/1", data) == {"log.retention.ms": "60000"}
    for entity in ("1", "<default>"):
        notice = encode_entity_config_change("brokers", entity)
        assert document(notice) == {"version": 2, "entity_path": f"brokers/{entity}"}
        assert parse_change_entity(notice) == ("brokers", entity)
