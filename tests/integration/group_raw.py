"""A group member speaking the Kafka protocol by hand (kio's classes over one TCP connection),
for the group tests that need requests no real client sends: garbage subscription metadata, an
oversized assignment, a second member with a static instance id already in use."""

from __future__ import annotations

import datetime
import socket
import struct
from typing import Any

from broker_process import BrokerProcess
from kio.schema.errors import ErrorCode
from kio.schema.join_group.v5 import request as join_v5
from kio.schema.leave_group.v3 import request as leave_v3
from kio.schema.offset_commit.v7 import request as commit_v7
from kio.schema.offset_delete.v0 import request as offset_delete_v0
from kio.schema.sync_group.v3 import request as sync_v3
from kio.serial import entity_reader
from raw_requests import encode_request, recv_exact

from weir.protocol.apis import ApiKey
from weir.protocol.codec import codec_for

TopicPartition = tuple[str, int]


def consumer_subscription(topics: list[str], user_data: bytes = b"") -> bytes:
    """ConsumerProtocolSubscription v0: version, [topic], user data (as real clients send)."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", len(user_data)) + user_data


def consumer_assignment(partitions: dict[str, list[int]], user_data: bytes = b"") -> bytes:
    """ConsumerProtocolAssignment v0: version, [topic, [partition]], user data."""
    out = struct.pack(">hi", 0, len(partitions))
    for topic, indexes in partitions.items():
        out += struct.pack(">h", len(topic)) + topic.encode()
        out += struct.pack(f">i{len(indexes)}i", len(indexes), *indexes)
    return out + struct.pack(">i", len(user_data)) + user_data


class RawMember:
    """One connection; `join` answers when the rebalance completes, like a real member's."""

    def __init__(self, broker: BrokerProcess, group: str, *, timeout: float = 30) -> None:
        self.sock = socket.create_connection(("127.0.0.1", broker.port), timeout=timeout)
        self.group = group
        self.member_id = ""
        self.generation = -1
        self.instance_id: str | None = None
        self._correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def call(self, api_key: ApiKey, version: int, body: Any) -> Any:
        self._correlation_id += 1
        codec = codec_for(api_key, version)
        self.sock.sendall(
            encode_request(api_key, version, body, self._correlation_id, "raw-member")
        )
        (size,) = struct.unpack(">i", recv_exact(self.sock, 4))
        payload = recv_exact(self.sock, size)
        response_cls = codec.response_type
        header, used = entity_reader(response_cls.__header_schema__)(payload, 0)  # type: ignore[attr-defined]
        assert header.correlation_id == self._correlation_id
        response, _ = entity_reader(response_cls)(payload, used)
        return response

    # ---- group requests ---------------------------------------------------------------------

    def join(
        self,
        protocols: list[tuple[str, bytes]],
        *,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        instance_id: str | None = None,
        protocol_type: str = "consumer",
    ) -> Any:
        """JoinGroup v5, answering MEMBER_ID_REQUIRED with the member id it hands out."""
        self.instance_id = instance_id
        while True:
            response = self.call(ApiKey.JOIN_GROUP, 5, join_v5.JoinGroupRequest(
                group_id=self.group,
                session_timeout=datetime.timedelta(milliseconds=session_timeout_ms),
                rebalance_timeout=datetime.timedelta(milliseconds=rebalance_timeout_ms),
                member_id=self.member_id, group_instance_id=instance_id,
                protocol_type=protocol_type,
                protocols=tuple(join_v5.JoinGroupRequestProtocol(name=n, metadata=m)
                                for n, m in protocols)))  # fmt: skip
            if response.member_id:
                self.member_id = response.member_id
            if response.error_code is not ErrorCode.member_id_required:
                break
        if response.error_code is ErrorCode.none:
            self.generation = response.generation_id
        return response

    def sync(self, assignments: dict[str, bytes]) -> Any:
        return self.call(ApiKey.SYNC_GROUP, 3, sync_v3.SyncGroupRequest(
            group_id=self.group, generation_id=self.generation, member_id=self.member_id,
            group_instance_id=self.instance_id,
            assignments=tuple(sync_v3.SyncGroupRequestAssignment(member_id=m, assignment=a)
                              for m, a in assignments.items())))  # fmt: skip

    def heartbeat(self) -> ErrorCode:
        from kio.schema.heartbeat.v3.request import HeartbeatRequest

        response = self.call(ApiKey.HEARTBEAT, 3, HeartbeatRequest(
            group_id=self.group, generation_id=self.generation, member_id=self.member_id,
            group_instance_id=self.instance_id))  # fmt: skip
        return response.error_code

    def leave(self) -> Any:
        return self.call(ApiKey.LEAVE_GROUP, 3, leave_v3.LeaveGroupRequest(
            group_id=self.group, members=(leave_v3.MemberIdentity(
                member_id=self.member_id, group_instance_id=self.instance_id),)))  # fmt: skip

    def commit(self, offsets: dict[TopicPartition, int]) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit v7 as this member (or as a simple consumer before it joined)."""
        topics: dict[str, list[Any]] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append(commit_v7.OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset,
                committed_leader_epoch=-1, committed_metadata=None))  # fmt: skip
        response = self.call(ApiKey.OFFSET_COMMIT, 7, commit_v7.OffsetCommitRequest(
            group_id=self.group, generation_id_or_member_epoch=self.generation,
            member_id=self.member_id, group_instance_id=self.instance_id,
            topics=tuple(commit_v7.OffsetCommitRequestTopic(name=t, partitions=tuple(ps))
                         for t, ps in topics.items())))  # fmt: skip
        return {(t.name, p.partition_index): p.error_code
                for t in response.topics for p in t.partitions}  # fmt: skip

    def delete_offsets(
        self, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        m = offset_delete_v0
        topics: dict[str, list[Any]] = {}
        for topic, partition in partitions:
            topics.setdefault(topic, []).append(
                m.OffsetDeleteRequestPartition(partition_index=partition)
            )
        response = self.call(ApiKey.OFFSET_DELETE, 0, m.OffsetDeleteRequest(
            group_id=self.group,
            topics=tuple(m.OffsetDeleteRequestTopic(name=t, partitions=tuple(ps))
                         for t, ps in topics.items())))  # fmt: skip
        return response.error_code, {(t.name, p.partition_index): p.error_code
                                     for t in response.topics for p in t.partitions}  # fmt: skip
