"""Followers replicate: one fetcher per leader broker, fetching all the partitions this broker
follows from it in one Fetch request (replica_id set), appending the leader's batches byte for
byte (offsets and leader epochs as the leader wrote them). The requests use a fetch session
(KIP-227, `follower_session`): after the first, each carries only the partitions whose fetch
offset or epoch changed, and partitions absent from a response had nothing new.

Before a partition is fetched after a leader change, its follower asks the leader where its own
latest leader epoch ends (OffsetForLeaderEpoch, KIP-101/279) and truncates there: a tail written
under an epoch the new leader does not have (an old leader's unreplicated writes) is cut, never
served. The follower's high watermark is the leader's, bounded by its own log end.

Thread-safety (docs/threads.md): event-loop only.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from weir.broker.follower_session import FollowerFetchSession, PartitionFetchState
from weir.broker.partition import Partition
from weir.broker.peer import PeerConnection
from weir.broker.replica_manager import ReplicaManager
from weir.broker.security.inter_broker import InterBrokerSecurity
from weir.protocol.apis import ApiKey
from weir.protocol.codec import request_module
from weir.protocol.errors import RemoteProtocolError
from weir.records import iter_batches
from weir.records.control import marker_commits
from weir.storage import StorageError

log = logging.getLogger(__name__)

FETCH_VERSION = 12
EPOCH_VERSION = 4
MAX_WAIT_MS = 500
FETCH_MAX_BYTES = 16 * 1024 * 1024
PARTITION_MAX_BYTES = 1024 * 1024
RETRY_BACKOFF_S = 0.5
#: how long closing a fetcher waits for its loop to leave (one round trip is cut short by then)
CLOSE_TIMEOUT_S = 5.0
CLIENT_ID = "weir-replica-fetcher"

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class _Followed:
    partition: Partition
    leader_epoch: int
    #: whether the log was truncated to the leader's end of our latest epoch
    truncated: bool = False
    #: whether the last fetch found it at the leader's high watermark (no lag): a follower
    #: throttle does not hold it back
    caught_up: bool = False


class LeaderFetcher:
    """Fetches every partition this broker follows from one leader."""

    def __init__(
        self,
        node_id: int,
        leader_id: int,
        address: tuple[str, int],
        replicas: ReplicaManager,
        security: InterBrokerSecurity | None = None,
    ) -> None:
        self.node_id = node_id
        self.leader_id = leader_id
        self.address = address
        self._replicas = replicas
        self.partitions: dict[TopicPartition, _Followed] = {}
        self._connection = PeerConnection(address, CLIENT_ID, security=security)
        self._session = FollowerFetchSession()
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def add(self, partition: Partition, leader_epoch: int) -> None:
        self.partitions[(partition.topic, partition.index)] = _Followed(partition, leader_epoch)
        self._wake.set()

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)

    async def close(self) -> None:
        """Stop fetching; returns within CLOSE_TIMEOUT_S whatever the fetch loop is doing."""
        self._task.cancel()
        done, _ = await asyncio.wait({self._task}, timeout=CLOSE_TIMEOUT_S)
        if not done:
            log.error("the fetcher from broker %d did not stop within %gs of its cancellation; "
                      "left behind", self.leader_id, CLOSE_TIMEOUT_S)  # fmt: skip
        self._connection.close()

    async def _run(self) -> None:
        while True:
            if not self.partitions:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                await self._truncate_diverged()
                await self._fetch_once()
            except (OSError, asyncio.IncompleteReadError, RemoteProtocolError) as exc:
                if _cancelling():  # a failure that raced our cancellation: leave, do not retry
                    raise asyncio.CancelledError from exc
                log.info("fetching from broker %d at %s:%d: %s; retrying", self.leader_id,
                         *self.address, exc)  # fmt: skip
                await asyncio.sleep(RETRY_BACKOFF_S)

    async def _exchange(self, api_key: int, version: int, body: Any) -> Any:
        return await self._connection.request(api_key, version, body)

    # ---- truncation ----------------------------------------------------------------------------

    async def _truncate_diverged(self) -> None:
        pending = [f for f in self.partitions.values() if not f.truncated]
        if not pending:
            return
        m = request_module(ApiKey.OFFSET_FOR_LEADER_EPOCH, EPOCH_VERSION)
        topics: dict[str, list[Any]] = {}
        for entry in pending:
            partition = entry.partition
            topics.setdefault(partition.topic, []).append(
                m.OffsetForLeaderPartition(
                    partition=partition.index,
                    current_leader_epoch=entry.leader_epoch,
                    leader_epoch=partition.log.latest_epoch,
                )
            )
        body = m.OffsetForLeaderEpochRequest(
            replica_id=self.node_id,
            topics=tuple(
                m.OffsetForLeaderTopic(topic=t, partitions=tuple(ps)) for t, ps in topics.items()
            ),
        )
        response = await self._exchange(ApiKey.OFFSET_FOR_LEADER_EPOCH, EPOCH_VERSION, body)
        for topic in response.topics:
            for answer in topic.partitions:
                followed = self.partitions.get((topic.topic, answer.partition))
                if followed is None or followed.truncated:
                    continue
                if answer.error_code != ErrorCode.none:
                    log.info("%s-%d: leader %d answers %s to OffsetForLeaderEpoch", topic.topic,
                             answer.partition, self.leader_id, answer.error_code)  # fmt: skip
                    continue
                self._truncate(followed, answer.leader_epoch, answer.end_offset)

    def _truncate(self, followed: _Followed, epoch: int, end_offset: int) -> None:
        """KIP-279: cut at the leader's end of the epoch, or at our own end of the epoch the
        leader answered with, whichever is first."""
        log_ = followed.partition.log
        target = log_.log_end_offset
        if epoch >= 0 and end_offset >= 0:
            own_epoch, own_end = log_.epoch_cache.end_offset_for(epoch, log_.log_end_offset)
            target = min(target, end_offset)
            if own_epoch == epoch:
                target = min(target, own_end)
        elif end_offset < 0:  # the leader has no epoch that old: start from its log
            target = log_.high_watermark
        if target < log_.log_end_offset:
            log.warning("%s-%d: truncating from %d to %d (leader %d, epoch %d)",
                        followed.partition.topic, followed.partition.index, log_.log_end_offset,
                        target, self.leader_id, epoch)  # fmt: skip
            log_.truncate_to(target)
            self._replicas.reload_producer_state(followed.partition)
        followed.truncated = True

    # ---- fetch ---------------------------------------------------------------------------------

    async def _fetch_once(self) -> None:
        quota = self._replicas.replication_quotas.follower
        now = self._replicas.now_ms()
        ready = [
            f for f in self.partitions.values()
            if f.truncated and not (quota.enabled and quota.holds(
                f.partition.log.config, f.partition.index, f.caught_up, now))
        ]  # fmt: skip
        if not ready:
            held = any(f.truncated for f in self.partitions.values())
            await asyncio.sleep(quota.hold_ms(now) / 1000 if held else RETRY_BACKOFF_S)
            return
        m = request_module(ApiKey.FETCH, FETCH_VERSION)
        session = self._session.next_request({_tp(entry): _fetch_state(entry) for entry in ready})
        topics: dict[str, list[Any]] = {}
        for (topic, index), state in session.to_send.items():
            topics.setdefault(topic, []).append(
                m.FetchPartition(
                    partition=index,
                    current_leader_epoch=state.current_leader_epoch,
                    fetch_offset=state.fetch_offset,
                    last_fetched_epoch=state.last_fetched_epoch,
                    log_start_offset=state.log_start_offset,
                    partition_max_bytes=state.max_bytes,
                )
            )
        body = m.FetchRequest(
            cluster_id=None,
            replica_id=self.node_id,
            max_wait=datetime.timedelta(milliseconds=MAX_WAIT_MS),
            min_bytes=1,
            max_bytes=FETCH_MAX_BYTES,
            isolation_level=0,
            session_id=session.session_id,
            session_epoch=session.epoch,
            topics=tuple(m.FetchTopic(topic=t, partitions=tuple(ps)) for t, ps in topics.items()),
            forgotten_topics_data=_forgotten(m, session.to_forget),
            rack_id="",
        )
        try:
            response = await self._exchange(ApiKey.FETCH, FETCH_VERSION, body)
        except BaseException:
            self._session.handle_error()
            raise
        if not self._session.handle_response(session, response.error_code, response.session_id):
            log.info("fetch session with broker %d: %s; starting a new one", self.leader_id,
                     response.error_code)  # fmt: skip
            return
        refused = throttled = 0
        for topic in response.responses:
            for data in topic.partitions:
                followed = self.partitions.get((topic.topic, data.partition_index))
                if followed is not None:
                    if quota.enabled and quota.applies(
                        followed.partition.log.config, data.partition_index, followed.caught_up
                    ):
                        throttled += len(data.records or b"")
                    self._apply(followed, data)
                refused += data.error_code != ErrorCode.none
        quota.record(throttled, self._replicas.now_ms())
        if refused and refused == len(ready):
            await asyncio.sleep(RETRY_BACKOFF_S)  # as replica.fetch.backoff.ms: no busy loop

    def _apply(self, followed: _Followed, data: Any) -> None:
        partition = followed.partition
        partition_log = partition.log
        if data.error_code == ErrorCode.offset_out_of_range:
            if partition_log.log_end_offset < data.log_start_offset:
                partition_log.truncate_fully_and_start_at(data.log_start_offset)
                self._replicas.reload_producer_state(partition)
            else:
                followed.truncated = False  # diverged: ask for the epoch's end again
            return
        if data.error_code != ErrorCode.none:
            if data.error_code in (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch,
                                   ErrorCode.unknown_leader_epoch):  # fmt: skip
                return  # the controller will say who leads now
            log.info("%s-%d: fetch from %d: %s", partition.topic, partition.index,
                     self.leader_id, data.error_code)  # fmt: skip
            return
        records = data.records
        if records:
            try:
                if any(header.is_transactional for header in iter_batches(records)):
                    partition_log.note_transactions()
                for header in iter_batches(records):  # producer state current at every roll
                    view = memoryview(records)[header.position : header.position + header.size]
                    partition_log.append_as_follower(view)
                    partition.record_batch(
                        header.fields(), header.base_offset, marker_commits(header)
                    )
            except (StorageError, OSError) as exc:
                log.error("%s-%d: follower append failed: %s", partition.topic, partition.index,
                          exc)  # fmt: skip
                return
        partition.follow_leader_high_watermark(data.high_watermark)
        followed.caught_up = partition_log.log_end_offset >= data.high_watermark


def _tp(entry: _Followed) -> TopicPartition:
    return (entry.partition.topic, entry.partition.index)


def _fetch_state(entry: _Followed) -> PartitionFetchState:
    """What this round's Fetch asks of `entry`: from our log end, under our latest epoch."""
    partition_log = entry.partition.log
    return PartitionFetchState(
        fetch_offset=partition_log.log_end_offset,
        current_leader_epoch=entry.leader_epoch,
        last_fetched_epoch=partition_log.latest_epoch,
        log_start_offset=partition_log.log_start_offset,
        max_bytes=PARTITION_MAX_BYTES,
    )


def _forgotten(m: Any, partitions: list[TopicPartition]) -> tuple[Any, ...]:
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    return tuple(m.ForgottenTopic(topic=t, partitions=tuple(ps)) for t, ps in by_topic.items())


def _cancelling() -> bool:
    """Whether the running task has been asked to stop."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class ReplicaFetchers:
    """The fetchers of this broker, one per leader it follows partitions from."""

    def __init__(
        self, node_id: int, replicas: ReplicaManager, security: InterBrokerSecurity | None = None
    ) -> None:
        self.node_id = node_id
        self._replicas = replicas
        self._security = security
        self._fetchers: dict[int, LeaderFetcher] = {}
        self._following: dict[TopicPartition, int] = {}

    def follow(
        self, partition: Partition, leader_id: int, address: tuple[str, int], leader_epoch: int
    ) -> None:
        tp = (partition.topic, partition.index)
        self.stop_following(tp)
        fetcher = self._fetchers.get(leader_id)
        if fetcher is None or fetcher.address != address:
            fetcher = LeaderFetcher(
                self.node_id, leader_id, address, self._replicas, self._security
            )
            old = self._fetchers.get(leader_id)
            if old is not None:
                for followed in old.partitions.values():
                    fetcher.add(followed.partition, followed.leader_epoch)
                asyncio.get_running_loop().create_task(old.close())
            self._fetchers[leader_id] = fetcher
        fetcher.add(partition, leader_epoch)
        self._following[tp] = leader_id

    def stop_following(self, tp: TopicPartition) -> None:
        leader = self._following.pop(tp, None)
        if leader is not None and leader in self._fetchers:
            self._fetchers[leader].remove(tp)

    async def close(self) -> None:
        await asyncio.gather(*(f.close() for f in self._fetchers.values()))
        self._fetchers.clear()
