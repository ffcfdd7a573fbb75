"""The ZooKeeper-era inter-broker APIs (LeaderAndIsr, StopReplica, UpdateMetadata,
ControlledShutdown) through Weir's codec, and the client side of the codec for any API."""

from __future__ import annotations

import dataclasses
import datetime
import struct
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.metadata.v12 import response as metadata_v12_response

from weir.protocol import kio_legacy
from weir.protocol.apis import (
    ADVERTISED,
    CLUSTER_ONLY_VERSIONS,
    INTER_BROKER_VERSIONS,
    ApiKey,
    InterBrokerApiKey,
    cluster_advertised,
    decodable,
)
from weir.protocol.codec import (
    codec_for,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from weir.protocol.errors import (
    InvalidRequestError,
    RemoteProtocolError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)
from weir.protocol.guard import checked_payload
from weir.protocol.kio_legacy.controlled_shutdown.v2 import request as controlled_shutdown_v2
from weir.protocol.kio_legacy.controlled_shutdown.v2 import response as shutdown_v2_response
from weir.protocol.kio_legacy.controlled_shutdown.v3 import request as controlled_shutdown_v3
from weir.protocol.kio_legacy.controlled_shutdown.v3 import response as shutdown_v3_response
from weir.protocol.kio_legacy.leader_and_isr.v3 import request as leader_and_isr_v3
from weir.protocol.kio_legacy.leader_and_isr.v3 import response as leader_and_isr_v3_response
from weir.protocol.kio_legacy.leader_and_isr.v7 import request as leader_and_isr_v7
from weir.protocol.kio_legacy.leader_and_isr.v7 import response as leader_and_isr_v7_response
from weir.protocol.kio_legacy.stop_replica.v1 import request as stop_replica_v1
from weir.protocol.kio_legacy.stop_replica.v1 import response as stop_replica_v1_response
from weir.protocol.kio_legacy.stop_replica.v4 import request as stop_replica_v4
from weir.protocol.kio_legacy.stop_replica.v4 import response as stop_replica_v4_response
from weir.protocol.kio_legacy.update_metadata.v5 import request as update_metadata_v5
from weir.protocol.kio_legacy.update_metadata.v5 import response as update_metadata_v5_response
from weir.protocol.kio_legacy.update_metadata.v8 import request as update_metadata_v8
from weir.protocol.kio_legacy.update_metadata.v8 import response as update_metadata_v8_response

CLUSTER = decodable(cluster_advertised())
ORDERS_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
CLICKS_ID = uuid.UUID("0f9e6c1a-3b1d-4d8e-9a51-2c7d3f0e4b21")
PLAINTEXT = 0  # Kafka's SecurityProtocol id


# ---- realistic messages, newest version and an older non-flexible one -------------------------


def leader_and_isr_7() -> Any:
    m = leader_and_isr_v7
    return m.LeaderAndIsrRequest(
        controller_id=2, is_k_raft_controller=False, controller_epoch=14, broker_epoch=4294967312,
        type_=2,  # FULL: every partition this broker hosts
        topic_states=(
            m.LeaderAndIsrTopicState(topic_name="orders", topic_id=ORDERS_ID, partition_states=(
                m.LeaderAndIsrPartitionState(
                    partition_index=0, controller_epoch=14, leader=1, leader_epoch=7,
                    isr=(1, 2, 3), partition_epoch=21, replicas=(1, 2, 3), is_new=False,
                ),
                m.LeaderAndIsrPartitionState(
                    partition_index=1, controller_epoch=13, leader=3, leader_epoch=2,
                    isr=(3, 1), partition_epoch=9, replicas=(3, 1, 2), adding_replicas=(2,),
                    removing_replicas=(), is_new=True, leader_recovery_state=1,
                ),
            )),
            m.LeaderAndIsrTopicState(topic_name="clicks", topic_id=CLICKS_ID, partition_states=(
                m.LeaderAndIsrPartitionState(
                    partition_index=5, controller_epoch=14, leader=2, leader_epoch=0, isr=(2,),
                    partition_epoch=0, replicas=(2, 4), removing_replicas=(4,), is_new=True,
                ),
            )),
        ),
        live_leaders=(
            m.LeaderAndIsrLiveLeader(broker_id=1, host_name="broker-1.weir.internal", port=9092),
            m.LeaderAndIsrLiveLeader(broker_id=2, host_name="10.0.0.12", port=9092),
            m.LeaderAndIsrLiveLeader(broker_id=3, host_name="broker-3", port=19092),
        ),
    )  # fmt: skip


def leader_and_isr_3() -> Any:
    m = leader_and_isr_v3
    return m.LeaderAndIsrRequest(
        controller_id=1, controller_epoch=3, broker_epoch=77,
        topic_states=(
            m.LeaderAndIsrTopicState(topic_name="orders", partition_states=(
                m.LeaderAndIsrPartitionState(
                    partition_index=0, controller_epoch=3, leader=1, leader_epoch=4,
                    isr=(1, 2), partition_epoch=5, replicas=(1, 2, 3), adding_replicas=(3,),
                    is_new=False,
                ),
                m.LeaderAndIsrPartitionState(
                    partition_index=1, controller_epoch=3, leader=2, leader_epoch=1, isr=(2, 3),
                    partition_epoch=2, replicas=(2, 3), is_new=True,
                ),
            )),
        ),
        live_leaders=(
            m.LeaderAndIsrLiveLeader(broker_id=1, host_name="broker-1", port=9092),
            m.LeaderAndIsrLiveLeader(broker_id=2, host_name="broker-2", port=9092),
        ),
    )  # fmt: skip


def stop_replica_4() -> Any:
    m = stop_replica_v4
    return m.StopReplicaRequest(
        controller_id=2, is_k_raft_controller=False, controller_epoch=14, broker_epoch=4294967312,
        topic_states=(
            m.StopReplicaTopicState(topic_name="orders", partition_states=(
                m.StopReplicaPartitionState(partition_index=0, leader_epoch=7,
                                            delete_partition=True),
                m.StopReplicaPartitionState(partition_index=3, leader_epoch=-2,  # deleting topic
                                            delete_partition=True),
            )),
            m.StopReplicaTopicState(topic_name="clicks", partition_states=(
                m.StopReplicaPartitionState(partition_index=5, leader_epoch=1,
                                            delete_partition=False),
            )),
        ),
    )  # fmt: skip


def stop_replica_1() -> Any:
    m = stop_replica_v1
    return m.StopReplicaRequest(
        controller_id=1, controller_epoch=3, broker_epoch=77, delete_partitions=True,
        topics=(
            m.StopReplicaTopicV1(name="orders", partition_indexes=(0, 1, 2)),
            m.StopReplicaTopicV1(name="clicks", partition_indexes=(4,)),
        ),
    )  # fmt: skip


def update_metadata_8() -> Any:
    m = update_metadata_v8
    return m.UpdateMetadataRequest(
        controller_id=2, is_k_raft_controller=False, controller_epoch=14, broker_epoch=4294967312,
        topic_states=(
            m.UpdateMetadataTopicState(topic_name="orders", topic_id=ORDERS_ID, partition_states=(
                m.UpdateMetadataPartitionState(
                    partition_index=0, controller_epoch=14, leader=1, leader_epoch=7,
                    isr=(1, 2), zk_version=21, replicas=(1, 2, 3), offline_replicas=(3,),
                ),
                m.UpdateMetadataPartitionState(
                    partition_index=1, controller_epoch=14, leader=-1, leader_epoch=8, isr=(),
                    zk_version=22, replicas=(3,), offline_replicas=(3,),
                ),
            )),
            m.UpdateMetadataTopicState(topic_name="clicks", topic_id=CLICKS_ID, partition_states=(
                m.UpdateMetadataPartitionState(
                    partition_index=0, controller_epoch=12, leader=2, leader_epoch=0, isr=(2,),
                    zk_version=0, replicas=(2,),
                ),
            )),
        ),
        live_brokers=(
            m.UpdateMetadataBroker(id_=1, rack="eu-west-1a", endpoints=(
                m.UpdateMetadataEndpoint(port=9092, host="broker-1", listener="PLAINTEXT",
                                         security_protocol=PLAINTEXT),
                m.UpdateMetadataEndpoint(port=9093, host="10.0.0.11", listener="INTERNAL",
                                         security_protocol=PLAINTEXT),
            )),
            m.UpdateMetadataBroker(id_=2, rack="eu-west-1b", endpoints=(
                m.UpdateMetadataEndpoint(port=9092, host="broker-2", listener="PLAINTEXT",
                                         security_protocol=PLAINTEXT),
            )),
            m.UpdateMetadataBroker(id_=4, rack=None, endpoints=(
                m.UpdateMetadataEndpoint(port=9092, host="broker-4", listener="PLAINTEXT",
                                         security_protocol=PLAINTEXT),
            )),
        ),
    )  # fmt: skip


def update_metadata_5() -> Any:
    m = update_metadata_v5
    return m.UpdateMetadataRequest(
        controller_id=1, controller_epoch=3, broker_epoch=77,
        topic_states=(
            m.UpdateMetadataTopicState(topic_name="orders", partition_states=(
                m.UpdateMetadataPartitionState(
                    partition_index=0, controller_epoch=3, leader=1, leader_epoch=4, isr=(1, 2),
                    zk_version=5, replicas=(1, 2, 3), offline_replicas=(3,),
                ),
            )),
        ),
        live_brokers=(
            m.UpdateMetadataBroker(id_=1, rack="rack-a", endpoints=(
                m.UpdateMetadataEndpoint(port=9092, host="broker-1", listener="PLAINTEXT",
                                         security_protocol=PLAINTEXT),
            )),
            m.UpdateMetadataBroker(id_=2, rack=None, endpoints=(
                m.UpdateMetadataEndpoint(port=9092, host="broker-2", listener="PLAINTEXT",
                                         security_protocol=PLAINTEXT),
            )),
        ),
    )  # fmt: skip


REQUESTS = [
    pytest.param(InterBrokerApiKey.LEADER_AND_ISR, 7, leader_and_isr_7, id="leader-and-isr-v7"),
    pytest.param(InterBrokerApiKey.LEADER_AND_ISR, 3, leader_and_isr_3, id="leader-and-isr-v3"),
    pytest.param(InterBrokerApiKey.STOP_REPLICA, 4, stop_replica_4, id="stop-replica-v4"),
    pytest.param(InterBrokerApiKey.STOP_REPLICA, 1, stop_replica_1, id="stop-replica-v1"),
    pytest.param(InterBrokerApiKey.UPDATE_METADATA, 8, update_metadata_8, id="update-metadata-v8"),
    pytest.param(InterBrokerApiKey.UPDATE_METADATA, 5, update_metadata_5, id="update-metadata-v5"),
    pytest.param(
        InterBrokerApiKey.CONTROLLED_SHUTDOWN, 3,
        lambda: controlled_shutdown_v3.ControlledShutdownRequest(broker_id=3,
                                                                 broker_epoch=4294967340),
        id="controlled-shutdown-v3",
    ),
    pytest.param(
        InterBrokerApiKey.CONTROLLED_SHUTDOWN, 2,
        lambda: controlled_shutdown_v2.ControlledShutdownRequest(broker_id=3, broker_epoch=4096),
        id="controlled-shutdown-v2",
    ),
]  # fmt: skip

RESPONSES = [
    pytest.param(
        InterBrokerApiKey.LEADER_AND_ISR, 7,
        leader_and_isr_v7_response.LeaderAndIsrResponse(error_code=ErrorCode.none, topics=(
            leader_and_isr_v7_response.LeaderAndIsrTopicError(topic_id=ORDERS_ID, partition_errors=(
                leader_and_isr_v7_response.LeaderAndIsrPartitionError(
                    partition_index=0, error_code=ErrorCode.none),
                leader_and_isr_v7_response.LeaderAndIsrPartitionError(
                    partition_index=1, error_code=ErrorCode.kafka_storage_error),
            )),
        )),
        id="leader-and-isr-v7",
    ),
    pytest.param(
        InterBrokerApiKey.LEADER_AND_ISR, 3,
        leader_and_isr_v3_response.LeaderAndIsrResponse(
            error_code=ErrorCode.stale_controller_epoch, partition_errors=()),
        id="leader-and-isr-v3",
    ),
    pytest.param(
        InterBrokerApiKey.STOP_REPLICA, 4,
        stop_replica_v4_response.StopReplicaResponse(error_code=ErrorCode.none, partition_errors=(
            stop_replica_v4_response.StopReplicaPartitionError(
                topic_name="orders", partition_index=0, error_code=ErrorCode.none),
            stop_replica_v4_response.StopReplicaPartitionError(
                topic_name="orders", partition_index=3, error_code=ErrorCode.fenced_leader_epoch),
        )),
        id="stop-replica-v4",
    ),
    pytest.param(
        InterBrokerApiKey.STOP_REPLICA, 1,
        stop_replica_v1_response.StopReplicaResponse(error_code=ErrorCode.none, partition_errors=(
            stop_replica_v1_response.StopReplicaPartitionError(
                topic_name="clicks", partition_index=4, error_code=ErrorCode.none),
        )),
        id="stop-replica-v1",
    ),
    pytest.param(
        InterBrokerApiKey.UPDATE_METADATA, 8,
        update_metadata_v8_response.UpdateMetadataResponse(error_code=ErrorCode.none),
        id="update-metadata-v8",
    ),
    pytest.param(
        InterBrokerApiKey.UPDATE_METADATA, 5,
        update_metadata_v5_response.UpdateMetadataResponse(
            error_code=ErrorCode.stale_broker_epoch),
        id="update-metadata-v5",
    ),
    pytest.param(
        InterBrokerApiKey.CONTROLLED_SHUTDOWN, 3,
        shutdown_v3_response.ControlledShutdownResponse(
            error_code=ErrorCode.none, remaining_partitions=(
                shutdown_v3_response.RemainingPartition(topic_name="orders", partition_index=1),
                shutdown_v3_response.RemainingPartition(topic_name="clicks", partition_index=0),
            )),
        id="controlled-shutdown-v3",
    ),
    pytest.param(
        InterBrokerApiKey.CONTROLLED_SHUTDOWN, 2,
        shutdown_v2_response.ControlledShutdownResponse(
            error_code=ErrorCode.not_controller, remaining_partitions=()),
        id="controlled-shutdown-v2",
    ),
]  # fmt: skip


def unframed(frame: bytes) -> bytes:
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    return frame[4:]


def string(value: str) -> bytes:
    """A legacy (int16-length) string, as in every request header's client id."""
    return struct.pack(">h", len(value)) + value.encode()


# ---- the version table -------------------------------------------------------------------------


def test_inter_broker_apis_are_kafkas_keys_and_not_advertised_by_default() -> None:
    for key in InterBrokerApiKey:
        assert kio_legacy.api_key_map[key.value] == key.name.lower()
    assert set(INTER_BROKER_VERSIONS) == set(InterBrokerApiKey)
    assert not set(INTER_BROKER_VERSIONS) & set(ADVERTISED)
    assert not set(InterBrokerApiKey) & set(decodable())


def test_the_cluster_table_is_the_advertised_one_plus_the_inter_broker_apis() -> None:
    table = cluster_advertised()
    assert table == {**{int(k): v for k, v in ADVERTISED.items()},
                     **{int(k): v for k, v in INTER_BROKER_VERSIONS.items()},
                     **{int(k): v for k, v in CLUSTER_ONLY_VERSIONS.items()}}  # fmt: skip
    assert CLUSTER[ApiKey.PRODUCE][0] == 3  # refusals still apply
    assert CLUSTER[InterBrokerApiKey.LEADER_AND_ISR] == (0, 7)


def test_every_inter_broker_version_in_the_table_has_request_and_response_classes() -> None:
    for key, (low, high) in INTER_BROKER_VERSIONS.items():
        for version in range(low, high + 1):
            codec = codec_for(key, version)
            assert codec.request_type.__api_key__ == key  # type: ignore[attr-defined]
            assert codec.request_type.__version__ == version  # type: ignore[attr-defined]
            assert codec.response_type.__version__ == version  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("api_key", "version"),
    [(InterBrokerApiKey.CONTROLLED_SHUTDOWN, 0), (InterBrokerApiKey.LEADER_AND_ISR, 8),
     (InterBrokerApiKey.UPDATE_METADATA, 9), (InterBrokerApiKey.STOP_REPLICA, -1)],
)  # fmt: skip
def test_a_version_kio_legacy_lacks_is_unsupported_even_if_a_table_allows_it(
    api_key: int, version: int
) -> None:
    header = struct.pack(">hhi", api_key, version, 8) + string("c")
    with pytest.raises(UnsupportedVersionError) as caught:
        decode_request(header, {api_key: (-1, 99)})
    assert caught.value.correlation_id == 8


def test_a_broker_outside_cluster_mode_refuses_the_inter_broker_apis() -> None:
    payload = unframed(encode_request(4, 7, 1, "controller-2", leader_and_isr_7()))
    with pytest.raises(UnknownApiKeyError):
        decode_request(payload, decodable())


# ---- requests -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("api_key", "version", "make"), REQUESTS)
def test_an_inter_broker_request_round_trips(api_key: int, version: int, make: Any) -> None:
    body = make()
    request = decode_request(unframed(encode_request(api_key, version, 91, "ctl", body)), CLUSTER)
    assert (request.api_key, request.api_version, request.correlation_id) == (api_key, version, 91)
    assert request.client_id == "ctl"
    assert request.body == body
    assert type(request.header).__flexible__ == type(body).__flexible__


@pytest.mark.parametrize(("api_key", "version", "make"), REQUESTS)
def test_the_guard_passes_an_inter_broker_request_whole_and_refuses_every_truncation(
    api_key: int, version: int, make: Any
) -> None:
    payload = unframed(encode_request(api_key, version, 5, "ctl", make()))
    codec = codec_for(api_key, version)
    assert checked_payload(payload, codec.header_type, codec.request_type) == payload
    for end in range(len(payload)):
        with pytest.raises(InvalidRequestError):
            checked_payload(payload[:end], codec.header_type, codec.request_type)
        with pytest.raises(InvalidRequestError):
            decode_request(payload[:end], CLUSTER)


def test_update_metadata_v8_keeps_its_tagged_type_and_drops_unknown_tags() -> None:
    body = update_metadata_8()
    payload = unframed(encode_request(6, 8, 3, "ctl", body))
    assert payload.endswith(b"\x00")  # type_ is 0 (the default): no tagged fields written
    tags = b"\x02" + b"\x00\x01\x02" + b"\x05\x02\xab\xcd"  # type_ = 2 (FULL); tag 5 unknown
    request = decode_request(payload[:-1] + tags, CLUSTER)
    assert request.body == dataclasses.replace(body, type_=2)


def test_controlled_shutdown_v3_is_kafkas_bytes() -> None:
    body = controlled_shutdown_v3.ControlledShutdownRequest(broker_id=3, broker_epoch=2**32 + 12)
    expected = (
        struct.pack(">hhi", 7, 3, 0x01020304)  # api key, api version, correlation id
        + string("broker-3")  # request header v2: client id stays a legacy string ...
        + b"\x00"  # ... then no tagged fields
        + struct.pack(">iq", 3, 2**32 + 12)  # broker id, broker epoch
        + b"\x00"  # no tagged fields
    )
    frame = encode_request(7, 3, 0x01020304, "broker-3", body)
    assert frame == struct.pack(">i", len(expected)) + expected
    assert decode_request(expected, CLUSTER).body == body


def test_controlled_shutdown_v2_is_kafkas_bytes() -> None:
    body = controlled_shutdown_v2.ControlledShutdownRequest(broker_id=1, broker_epoch=-1)
    expected = struct.pack(">hhi", 7, 2, 9) + string("b1") + struct.pack(">iq", 1, -1)
    assert encode_request(7, 2, 9, "b1", body) == struct.pack(">i", len(expected)) + expected


def test_a_null_client_id_is_written_as_length_minus_one() -> None:
    body = controlled_shutdown_v3.ControlledShutdownRequest(broker_id=3, broker_epoch=5)
    payload = unframed(encode_request(7, 3, 1, None, body))
    assert payload[8:11] == b"\xff\xff\x00"
    assert decode_request(payload, CLUSTER).client_id is None


def test_a_body_of_another_version_is_refused_before_anything_is_written() -> None:
    body = controlled_shutdown_v2.ControlledShutdownRequest(broker_id=1, broker_epoch=5)
    with pytest.raises(TypeError, match="v3"):
        encode_request(7, 3, 1, "b1", body)


# ---- responses ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("api_key", "version", "body"), RESPONSES)
def test_an_inter_broker_response_round_trips(api_key: int, version: int, body: Any) -> None:
    payload = unframed(encode_response(api_key, version, -7, body))
    assert decode_response(api_key, version, payload) == (-7, body)
    for end in range(len(payload)):
        with pytest.raises(RemoteProtocolError):
            decode_response(api_key, version, payload[:end])


def test_a_controlled_shutdown_v3_response_is_read_from_kafkas_bytes() -> None:
    payload = (
        struct.pack(">i", 44) + b"\x00"  # response header v1: correlation id, no tagged fields
        + struct.pack(">h", 0)  # error code
        + b"\x02"  # compact array of 1
        + b"\x07orders" + struct.pack(">i", 2) + b"\x00"  # compact string, partition, no tags
        + b"\x00"  # no tagged fields
    )  # fmt: skip
    assert decode_response(7, 3, payload) == (
        44,
        shutdown_v3_response.ControlledShutdownResponse(
            error_code=ErrorCode.none,
            remaining_partitions=(
                shutdown_v3_response.RemainingPartition(topic_name="orders", partition_index=2),
            ),
        ),
    )


# ---- the client side works for every API kio knows -------------------------------------------


def test_a_metadata_request_written_by_the_client_side_is_decoded_by_the_broker_side() -> None:
    body = metadata_v12.MetadataRequest(
        topics=(metadata_v12.MetadataRequestTopic(topic_id=None, name="orders"),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    request = decode_request(unframed(encode_request(3, 12, 17, "weir-admin", body)), decodable())
    assert (request.correlation_id, request.client_id, request.body) == (17, "weir-admin", body)


def test_an_api_versions_v3_response_is_read_with_header_v0_as_kafka_sends_it() -> None:
    payload = struct.pack(">i", 12) + struct.pack(">h", 0) + b"\x02" + struct.pack(">hhh", 18, 0, 3)
    payload += b"\x00" + struct.pack(">i", 0) + b"\x00"  # entry tags, throttle time, body tags
    correlation_id, decoded = decode_response(18, 3, payload)
    assert correlation_id == 12
    assert decoded.error_code == ErrorCode.none
    assert [(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys] == [(18, 0, 3)]


def test_a_metadata_v12_response_round_trips_through_the_client_side() -> None:
    m = metadata_v12_response
    body = m.MetadataResponse(
        throttle_time=datetime.timedelta(milliseconds=25),
        brokers=(m.MetadataResponseBroker(node_id=1, host="broker-1", port=9092, rack="a"),),
        cluster_id="weir",
        controller_id=1,
        topics=(),
    )
    payload = unframed(encode_response(3, 12, 5, body))
    assert decode_response(3, 12, payload) == (5, body)
