"""The controller's reads and writes of Kafka's znodes (Kafka's `KafkaZkClient`, controller part),
on the `weir.cluster.zk_client.ZooKeeper` interface.

Every write is fenced: a transaction whose first operation checks that `/controller_epoch` is
still at the version this controller wrote, so a controller that has been replaced changes
nothing (`ControllerMovedError`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping

from weir.cluster import znodes
from weir.cluster.controller.context import TopicPartition
from weir.cluster.zk_client import (
    BadVersionError,
    CheckVersion,
    CreateNode,
    DeleteNode,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    OpResult,
    SetData,
    ZnodeStat,
    ZooKeeper,
    ZooKeeperError,
)
from weir.cluster.znodes import (
    BrokerRegistration,
    PartitionState,
    TopicAssignment,
    ZnodeFormatError,
)

log = logging.getLogger(__package__)

#: tries at a topic's assignment znode that brokers may change meanwhile (CreatePartitions)
ASSIGNMENT_WRITE_ATTEMPTS = 5


class ControllerMovedError(Exception):
    """Another broker is the controller now: this one's writes were refused."""


class ControllerZkClient:
    """Thread-safety (docs/threads.md): the controller's event thread only (`epoch_zk_version` is
    its state)."""

    def __init__(self, zk: ZooKeeper) -> None:
        self.zk = zk
        #: the version of `/controller_epoch` this controller wrote: every write checks it
        self.epoch_zk_version = -1

    # ---- controllership --------------------------------------------------------------------------

    def register_controller(self, node_id: int, timestamp_ms: int) -> int | None:
        """Create the ephemeral `/controller` and write the next controller epoch in one
        transaction (Kafka's registerControllerAndIncrementControllerEpoch), so nobody sees the
        new controller with the old epoch; the epoch, or None if another broker holds
        `/controller`."""
        registration = znodes.encode_controller(node_id, timestamp_ms)
        while True:
            epoch, version = self._controller_epoch()
            create = CreateNode(znodes.CONTROLLER, registration, ephemeral=True)
            bump = SetData(znodes.CONTROLLER_EPOCH, str(epoch + 1).encode(), version)
            created, written = self.zk.multi([create, bump])
            if isinstance(created, NodeExistsError):
                return None
            if isinstance(written, BadVersionError):
                continue  # a controller came and went since the read: read the epoch again
            if not isinstance(written, ZnodeStat):
                raise written if isinstance(written, ZooKeeperError) else ZooKeeperError(
                    f"registering as controller: {created!r}, {written!r}")
            self.epoch_zk_version = written.version
            return epoch + 1

    def _controller_epoch(self) -> tuple[int, int]:
        """(`/controller_epoch`, its version); created as 0 when there is none yet."""
        while True:
            try:
                data, stat = self.zk.get(znodes.CONTROLLER_EPOCH)
                return znodes.parse_controller_epoch(data), stat.version
            except NoNodeError:
                with contextlib.suppress(NodeExistsError):
                    self.zk.create(znodes.CONTROLLER_EPOCH, b"0")

    def delete_controller_znode(self) -> None:
        """Remove `/controller` if this session created it."""
        try:
            _, stat = self.zk.get(znodes.CONTROLLER)
            if stat.ephemeral_owner == self.zk.session_id:
                self.zk.delete(znodes.CONTROLLER, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass
        except ZooKeeperError as exc:
            log.info("could not remove the controller znode: %s", exc)

    # ---- reads -----------------------------------------------------------------------------------

    def live_brokers(self) -> dict[int, BrokerRegistration]:
        brokers = {}
        for child in self.zk.get_children(znodes.BROKER_IDS):
            if not (child.isascii() and child.isdigit()):
                log.warning("ignoring %s/%s: not a broker id", znodes.BROKER_IDS, child)
                continue
            try:
                data, stat = self.zk.get(znodes.broker_path(int(child)))
                brokers[int(child)] = znodes.parse_broker(int(child), data, stat.czxid)
            except NoNodeError:
                continue
            except ZnodeFormatError as exc:
                log.warning("ignoring a malformed broker registration: %s", exc)
        return brokers

    def topic_names(self) -> list[str]:
        return self.zk.get_children(znodes.BROKER_TOPICS)

    def topic_assignment(self, name: str) -> TopicAssignment | None:
        """A topic's assignment; None if it is gone or not readable."""
        try:
            data, _ = self.zk.get(znodes.topic_path(name))
            return znodes.parse_assignment(name, data)
        except NoNodeError:
            return None
        except ZnodeFormatError as exc:
            log.warning("ignoring topic %s: %s", name, exc)
            return None

    def partition_state(self, tp: TopicPartition) -> tuple[PartitionState, int] | None:
        """A partition's leader and ISR with its znode's version; None without a (readable)
        state znode."""
        try:
            data, stat = self.zk.get(znodes.state_path(*tp))
            return znodes.parse_state(*tp, data), stat.version
        except NoNodeError:
            return None
        except ZnodeFormatError as exc:
            log.warning("ignoring the state of %s-%d: %s", *tp, exc)
            return None

    def topic_configs(self, name: str) -> dict[str, str]:
        try:
            data, _ = self.zk.get(znodes.topic_config_path(name))
            return znodes.parse_topic_config(name, data)
        except (NoNodeError, ZnodeFormatError):
            return {}

    def topics_to_delete(self) -> list[str]:
        return sorted(self.zk.get_children(znodes.DELETE_TOPICS))

    def preferred_election_request(self) -> list[TopicPartition] | None:
        """The partitions `/admin/preferred_replica_election` lists; None without a request."""
        try:
            data, _ = self.zk.get(znodes.PREFERRED_REPLICA_ELECTION)
        except NoNodeError:
            return None
        try:
            return znodes.parse_partition_list(data)
        except ZnodeFormatError as exc:
            log.warning("ignoring a preferred replica election request: %s", exc)
            return []

    def reassignment_request(self) -> dict[TopicPartition, tuple[int, ...]] | None:
        """The moves `/admin/reassign_partitions` asks for; None without a request (or an
        unreadable one, which is logged)."""
        try:
            data, _ = self.zk.get(znodes.REASSIGN_PARTITIONS)
        except NoNodeError:
            return None
        try:
            return znodes.parse_reassignment(data)
        except ZnodeFormatError as exc:
            log.warning("ignoring a partition reassignment request: %s", exc)
            return None

    # ---- fenced writes ---------------------------------------------------------------------------

    def _fenced(self, *ops: Op) -> list[Op]:
        return [CheckVersion(znodes.CONTROLLER_EPOCH, self.epoch_zk_version), *ops]

    def write_states(
        self,
        states: Mapping[TopicPartition, PartitionState],
        versions: Mapping[TopicPartition, int] | None,
    ) -> dict[TopicPartition, int | ZooKeeperError]:
        """Write partition states (create them when `versions` is None, else set them at those
        versions), all sent before any answer is awaited. Per partition: its znode's new
        version, or the error that refused it. ControllerMovedError if the epoch had moved."""
        if versions is None:
            for tp in states:
                self.zk.ensure_path(znodes.partition_path(*tp))
        pending = [(tp, self.zk.multi_async(self._fenced(self._state_op(tp, state, versions))))
                   for tp, state in states.items()]  # fmt: skip
        outcome: dict[TopicPartition, int | ZooKeeperError] = {}
        moved = False
        for tp, result in pending:
            results = result.get()
            moved |= _epoch_check_failed(results)
            outcome[tp] = _written_version(results[1])
        if moved:
            raise ControllerMovedError("the controller epoch changed under a state write")
        return outcome

    @staticmethod
    def _state_op(tp: TopicPartition, state: PartitionState,
                  versions: Mapping[TopicPartition, int] | None) -> Op:  # fmt: skip
        data = znodes.encode_state(state)
        if versions is None:
            return CreateNode(znodes.state_path(*tp), data)
        return SetData(znodes.state_path(*tp), data, versions[tp])

    def write_assignments(
        self, topic: str, changes: Mapping[int, tuple[tuple[int, ...], tuple[int, ...],
                                                      tuple[int, ...]]],
    ) -> None:  # fmt: skip
        """Set some partitions of a topic's assignment znode to (replicas, adding, removing),
        the others as they are (a CreatePartitions meanwhile is read again and kept).
        NoNodeError if the topic is gone."""
        for _ in range(ASSIGNMENT_WRITE_ATTEMPTS):
            data, stat = self.zk.get(znodes.topic_path(topic))
            current = znodes.parse_assignment(topic, data)
            partitions, adding, removing = (dict(current.partitions), dict(current.adding),
                                            dict(current.removing))  # fmt: skip
            for index, (replicas, added, removed) in changes.items():
                partitions[index], adding[index], removing[index] = replicas, added, removed
            updated = TopicAssignment(name=topic, topic_id=current.topic_id,
                                      partitions=partitions, adding=adding,
                                      removing=removing)  # fmt: skip
            results = self.zk.multi(self._fenced(
                SetData(znodes.topic_path(topic), znodes.encode_assignment(updated),
                        stat.version)))  # fmt: skip
            if _epoch_check_failed(results):
                raise ControllerMovedError("the controller epoch changed under an assignment")
            if not isinstance(results[1], BadVersionError):
                if isinstance(results[1], ZooKeeperError):
                    raise results[1]
                return
        raise BadVersionError(f"{znodes.topic_path(topic)} kept changing")

    def write_reassignment_request(self, targets: Mapping[TopicPartition, tuple[int, ...]]
                                   ) -> None:  # fmt: skip
        """What is left of `/admin/reassign_partitions`: the znode goes when nothing is."""
        if not targets:
            self.delete(znodes.REASSIGN_PARTITIONS)
            return
        results = self.zk.multi(self._fenced(
            SetData(znodes.REASSIGN_PARTITIONS, znodes.encode_reassignment(targets), -1)))
        if _epoch_check_failed(results):
            raise ControllerMovedError("the controller epoch changed")
        if isinstance(results[1], ZooKeeperError) and not isinstance(results[1], NoNodeError):
            raise results[1]

    def delete(self, path: str, *, recursive: bool = False) -> None:
        """Delete `path` (and, if `recursive`, everything under it), fenced; gone already is
        fine."""
        if recursive:
            try:
                children = self.zk.get_children(path)
            except NoNodeError:
                return
            for child in children:
                self.delete(f"{path}/{child}", recursive=True)
        results = self.zk.multi(self._fenced(DeleteNode(path)))
        if _epoch_check_failed(results):
            raise ControllerMovedError("the controller epoch changed")
        failure = results[1]
        if isinstance(failure, NotEmptyError):
            self.delete(path, recursive=True)
        elif isinstance(failure, ZooKeeperError) and not isinstance(failure, NoNodeError):
            raise failure


def _written_version(result: OpResult) -> int | ZooKeeperError:
    if isinstance(result, ZooKeeperError):
        return result
    return result.version if isinstance(result, ZnodeStat) else 0


def _epoch_check_failed(results: list[OpResult]) -> bool:
    """Whether a fenced transaction failed on its first operation, the check of
    `/controller_epoch` (another controller took over). When a later operation fails instead,
    the check is reported as rolled back, which is not a lost epoch."""
    return isinstance(results[0], (BadVersionError, NoNodeError))
