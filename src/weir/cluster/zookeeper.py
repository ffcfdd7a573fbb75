"""The ZooKeeper engine of the metadata store, and a broker's registration in the cluster.

`ZooKeeperMetadataStore` keeps the cluster's metadata in Apache ZooKeeper in Kafka's layout
(`weir.cluster.znodes`) through kazoo. Any broker turns an admin request into a ZooKeeper write
(a topic's assignment and config in one transaction, a deletion request, a config change with its
notification); the controller carries the change out. Reads come from a cache that watches keep
current: topics with their assignments and configs, the topics marked for deletion.

A broker registers with an ephemeral znode `/brokers/ids/N`; a second broker with the same id is
refused (`BrokerIdInUseError`), never taken over. When ZooKeeper expires the session the
registration is gone; the store registers again on the next session and tells its listeners.

Thread-safety (docs/threads.md): methods may be called from any thread; kazoo runs watches on its
own thread and the cache is guarded by a lock. Calls block on ZooKeeper: from an event loop, run
them in an executor.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from weir.cluster import znodes
from weir.cluster.metadata import (
    PRODUCER_ID_BLOCK,
    InvalidPartitionsError,
    InvalidTopicError,
    MetadataError,
    TopicExistsError,
    TopicInfo,
    UnknownTopicError,
    new_cluster_id,
    validate_topic_name,
)
from weir.cluster.znodes import BrokerRegistration, TopicAssignment, ZnodeFormatError

log = logging.getLogger(__name__)

CONNECT_RETRY_S = 1.0


class ZooKeeperUnavailableError(MetadataError):
    """ZooKeeper could not be reached (at start, or for a write)."""

    error_code = 15  # COORDINATOR_NOT_AVAILABLE is what clients retry; handlers map it


class BrokerIdInUseError(MetadataError):
    """Another live broker is registered with this node id."""


@dataclass(frozen=True, slots=True)
class ZooKeeperAddress:
    hosts: str
    chroot: str

    @classmethod
    def parse(cls, connect: str) -> ZooKeeperAddress:
        """`HOST:PORT[,HOST:PORT...][/chroot]`."""
        hosts, slash, chroot = connect.partition("/")
        if not hosts:
            raise ValueError(f"zookeeper.connect {connect!r} names no host")
        chroot = ("/" + chroot.strip("/")) if slash and chroot.strip("/") else ""
        return cls(hosts, chroot)


#: beyond the session timeout, how long a registration waits for an old session to expire
#: (ZooKeeper checks expiry once per tick)
REGISTRATION_MARGIN_S = 5.0
NO_OWNER = 0


class ZooKeeperMetadataStore:
    def __init__(self, connect: str, *, session_timeout_ms: int = 18_000) -> None:
        self.address = ZooKeeperAddress.parse(connect)
        self.session_timeout_ms = session_timeout_ms
        self.client = KazooClient(
            hosts=self.address.hosts + self.address.chroot,
            timeout=session_timeout_ms / 1000,
            connection_retry={"max_tries": -1, "delay": 0.2, "max_delay": 2.0},
        )
        self._lock = threading.Lock()
        self._cluster_id = ""
        self._assignments: dict[str, TopicAssignment] = {}
        self._configs: dict[str, dict[str, str]] = {}
        self._deleting: set[str] = set()
        self._watched: set[str] = set()
        self._registration: BrokerRegistration | None = None
        self._session_lost = False
        self._topic_listeners: list[Callable[[str], None]] = []
        self._session_listeners: list[Callable[[str], None]] = []
        self.client.add_listener(self._on_state)

    # ---- connection -----------------------------------------------------------------------------

    def start(self, timeout_s: float) -> None:
        """Connect (retrying until `timeout_s`), create the cluster's base paths and id, and
        start the watches. ZooKeeperUnavailableError if ZooKeeper cannot be reached."""
        deadline = time.monotonic() + timeout_s
        if self.address.chroot:
            self._ensure_chroot(deadline)
        while True:
            try:
                self.client.start(timeout=max(0.5, min(5.0, deadline - time.monotonic())))
                break
            except KazooTimeoutError:
                self.client.stop()
                if time.monotonic() >= deadline:
                    raise ZooKeeperUnavailableError(
                        f"ZooKeeper at {self.address.hosts} did not answer within {timeout_s:.0f} s"
                    ) from None
                log.warning("ZooKeeper at %s not reachable yet; retrying", self.address.hosts)
                time.sleep(CONNECT_RETRY_S)
        for path in znodes.BASE_PATHS:
            self.client.ensure_path(path)
        self._cluster_id = self._load_cluster_id()
        ChildrenWatch(self.client, znodes.BROKER_TOPICS, self._on_topics)
        ChildrenWatch(self.client, znodes.DELETE_TOPICS, self._on_delete_requests)
        ChildrenWatch(self.client, znodes.CONFIG_CHANGES, self._on_config_changes)

    def _ensure_chroot(self, deadline: float) -> None:
        root = KazooClient(hosts=self.address.hosts, timeout=self.session_timeout_ms / 1000)
        while True:
            try:
                root.start(timeout=max(0.5, min(5.0, deadline - time.monotonic())))
                break
            except KazooTimeoutError:
                root.stop()
                if time.monotonic() >= deadline:
                    raise ZooKeeperUnavailableError(
                        f"ZooKeeper at {self.address.hosts} did not answer"
                    ) from None
                log.warning("ZooKeeper at %s not reachable yet; retrying", self.address.hosts)
                time.sleep(CONNECT_RETRY_S)
        try:
            root.ensure_path(self.address.chroot)
        finally:
            root.stop()
            root.close()

    def close(self) -> None:
        """Remove this broker's registration, then end the session. The registration goes
        first and explicitly: a session whose close request is lost (a watch's request in
        flight as the client stops) would keep it, and refuse a restart, until it expires."""
        registration, self._registration = self._registration, None
        try:
            if registration is not None and self.client.connected:
                path = znodes.broker_path(registration.node_id)
                try:
                    _, stat = self.client.get(path)
                    if stat.ephemeralOwner == self.session_id:
                        self.client.delete(path, version=stat.version)
                except NoNodeError:
                    pass
            self.client.stop()
            self.client.close()
        except KazooException as exc:
            log.warning("closing the ZooKeeper session: %s", exc)

    @property
    def session_id(self) -> int:
        session = self.client.client_id
        return int(session[0]) if session else 0

    def add_session_listener(self, listener: Callable[[str], None]) -> None:
        """`listener("lost")` when the session expires, `("registered")` after registering again
        on a new session. Called on a kazoo thread."""
        self._session_listeners.append(listener)

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self._session_lost = True
            self._notify_session("lost")
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            # Listeners must not block kazoo's thread: register again on a thread of our own.
            threading.Thread(target=self._register_again, daemon=True).start()

    def _register_again(self) -> None:
        registration = self._registration
        if registration is None:
            return
        try:
            self.register(registration)
        except (MetadataError, KazooException) as exc:
            log.error("registering again as broker %d failed: %s", registration.node_id, exc)
            return
        self._notify_session("registered")

    def _notify_session(self, event: str) -> None:
        for listener in self._session_listeners:
            try:
                listener(event)
            except Exception:
                log.exception("session listener failed on %s", event)

    # ---- cluster id and registration -------------------------------------------------------------

    def _load_cluster_id(self) -> str:
        with contextlib.suppress(NodeExistsError):
            self.client.create(
                znodes.CLUSTER_ID, znodes.encode_cluster_id(new_cluster_id()), makepath=True
            )
        data, _ = self.client.get(znodes.CLUSTER_ID)
        return znodes.parse_cluster_id(data)

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    def register(self, registration: BrokerRegistration) -> int:
        """Create `/brokers/ids/N`; the broker epoch (the znode's czxid).

        A broker restarted right after a crash finds its id still held by its old session, which
        ZooKeeper ends only when the session times out. So while another session holds the id,
        this waits (saying so once) for up to a session timeout and a margin for that session to
        expire; BrokerIdInUseError if the id is still held after that."""
        path = znodes.broker_path(registration.node_id)
        deadline = time.monotonic() + self.session_timeout_ms / 1000 + REGISTRATION_MARGIN_S
        waiting = False
        while (owner := self._create_registration(path, registration)) is not None:
            if owner == NO_OWNER:
                continue
            if time.monotonic() > deadline:
                raise BrokerIdInUseError(
                    f"broker id {registration.node_id} is already registered in ZooKeeper by "
                    f"another live broker (session 0x{owner:x}); give this broker another "
                    "--node-id, or stop the other one"
                )
            if not waiting:
                waiting = True
                log.warning("broker id %d is still registered by session 0x%x (a broker that "
                            "stopped moments ago?); waiting up to %gs for that session to "
                            "expire", registration.node_id, owner,
                            deadline - time.monotonic())  # fmt: skip
            self._wait_deleted(path, deadline)
        _, stat = self.client.get(path)
        self._registration = registration
        return int(stat.czxid)

    @property
    def registration(self) -> BrokerRegistration | None:
        return self._registration

    def update_registration(self, registration: BrokerRegistration) -> None:
        """Rewrite this broker's registration (same id, same session: its epoch is kept), as a
        setting it carries changed at run time; it is written again so on each new session."""
        self._registration = registration
        data = znodes.encode_broker(registration, int(time.time() * 1000))
        try:
            self.client.set(znodes.broker_path(registration.node_id), data)
        except KazooException as exc:
            raise ZooKeeperUnavailableError(f"broker registration not updated: {exc}") from exc

    def _create_registration(self, path: str, registration: BrokerRegistration) -> int | None:
        """Create the ephemeral registration; None once it is ours, else the other owner."""
        data = znodes.encode_broker(registration, int(time.time() * 1000))
        try:
            self.client.create(path, data, ephemeral=True)
            return None
        except NodeExistsError:
            try:
                _, stat = self.client.get(path)
            except NoNodeError:
                return NO_OWNER  # gone meanwhile: try again at once
            owner = int(stat.ephemeralOwner)
            return None if owner == self.session_id else owner

    def _wait_deleted(self, path: str, deadline: float) -> None:
        """Return once `path` is gone, or at `deadline`."""
        gone = threading.Event()
        if self.client.exists(path, watch=lambda _event: gone.set()) is None:
            return
        gone.wait(max(0.0, deadline - time.monotonic()))

    def live_brokers(self) -> dict[int, BrokerRegistration]:
        brokers = {}
        for child in self.client.get_children(znodes.BROKER_IDS):
            if not (child.isascii() and child.isdigit()):
                log.warning("ignoring %s/%s: not a broker id", znodes.BROKER_IDS, child)
                continue
            try:
                data, stat = self.client.get(znodes.broker_path(int(child)))
                brokers[int(child)] = znodes.parse_broker(int(child), data, int(stat.czxid))
            except NoNodeError:
                continue
            except ZnodeFormatError as exc:
                log.warning("ignoring a malformed broker registration: %s", exc)
        return brokers

    # ---- the topic cache -------------------------------------------------------------------------

    def add_topic_listener(self, listener: Callable[[str], None]) -> None:
        """`listener(topic)` after a topic's assignment or config changed. Kazoo's thread."""
        self._topic_listeners.append(listener)

    def _on_topics(self, children: list[str]) -> None:
        names = set(children)
        with self._lock:
            for gone in set(self._assignments) - names:
                self._assignments.pop(gone, None)
                self._configs.pop(gone, None)
            new = names - self._watched
            self._watched |= new
        for name in sorted(new):
            DataWatch(self.client, znodes.topic_path(name), self._topic_watcher(name))
            DataWatch(self.client, znodes.topic_config_path(name), self._config_watcher(name))

    def _topic_watcher(self, name: str) -> Callable[..., bool]:
        def changed(data: bytes | None, stat: object) -> bool:
            if data is None and stat is None:
                with self._lock:
                    self._assignments.pop(name, None)
                    self._configs.pop(name, None)
                    self._watched.discard(name)
                self._notify_topic(name)
                return False
            try:
                assignment = znodes.parse_assignment(name, data)
            except ZnodeFormatError as exc:
                log.warning("ignoring topic %s: %s", name, exc)
                return True
            with self._lock:
                self._assignments[name] = assignment
            self._notify_topic(name)
            return True

        return changed

    def _config_watcher(self, name: str) -> Callable[..., bool]:
        def changed(data: bytes | None, stat: object) -> bool:
            with self._lock:
                if name not in self._watched:
                    return False
            if data is None:
                return True
            try:
                configs = znodes.parse_topic_config(name, data)
            except ZnodeFormatError as exc:
                log.warning("ignoring the config of topic %s: %s", name, exc)
                return True
            with self._lock:
                self._configs[name] = configs
            self._notify_topic(name)
            return True

        return changed

    def _on_delete_requests(self, children: list[str]) -> None:
        with self._lock:
            self._deleting = set(children)

    def _on_config_changes(self, children: list[str]) -> None:
        """Notifications are kept for other tools; the data watches above already apply
        config changes here."""

    def _notify_topic(self, name: str) -> None:
        for listener in self._topic_listeners:
            try:
                listener(name)
            except Exception:
                log.exception("topic listener failed for %s", name)

    def _info(self, name: str) -> TopicInfo | None:
        assignment = self._assignments.get(name)
        if assignment is None:
            return None
        replicas = tuple(assignment.partitions[p] for p in sorted(assignment.partitions))
        return TopicInfo(
            name=name,
            topic_id=assignment.topic_id,
            partitions=len(replicas),
            configs=dict(self._configs.get(name, {})),
            replicas=replicas,
        )

    def topics(self) -> dict[str, TopicInfo]:
        with self._lock:
            return {n: info for n in self._assignments if (info := self._info(n)) is not None}

    def topic(self, name: str) -> TopicInfo | None:
        with self._lock:
            return self._info(name)

    def marked_for_deletion(self, name: str) -> bool:
        with self._lock:
            return name in self._deleting

    def refresh_topic(self, name: str) -> TopicInfo | None:
        """Read one topic straight from ZooKeeper into the cache (after a write here)."""
        try:
            data, _ = self.client.get(znodes.topic_path(name))
        except NoNodeError:
            return None
        assignment = znodes.parse_assignment(name, data)
        try:
            config_data, _ = self.client.get(znodes.topic_config_path(name))
            configs = znodes.parse_topic_config(name, config_data)
        except NoNodeError:
            configs = {}
        with self._lock:
            self._assignments[name] = assignment
            self._configs[name] = configs
            return self._info(name)

    # ---- admin writes ----------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str],
        replicas: Sequence[Sequence[int]] | None = None,
    ) -> TopicInfo:
        validate_topic_name(name)
        if replicas is None or len(replicas) != partitions or partitions < 1:
            raise InvalidPartitionsError(
                f"topic {name!r} needs a replica list for each of its {partitions} partitions"
            )
        self._check_collision(name)
        if self.marked_for_deletion(name):
            raise TopicExistsError(f"Topic '{name}' is marked for deletion.")
        assignment = TopicAssignment(
            name=name,
            topic_id=uuid.uuid4(),
            partitions={p: tuple(r) for p, r in enumerate(replicas)},
        )
        transaction = self.client.transaction()
        transaction.create(znodes.topic_config_path(name), znodes.encode_topic_config(configs))
        transaction.create(znodes.topic_path(name), znodes.encode_assignment(assignment))
        results = transaction.commit()
        failure = next((r for r in results if isinstance(r, Exception)), None)
        if isinstance(failure, NodeExistsError):
            raise TopicExistsError(f"Topic '{name}' already exists.")
        if failure is not None:
            raise failure
        with self._lock:
            self._assignments[name] = assignment
            self._configs[name] = dict(configs)
            info = self._info(name)
        assert info is not None
        return info

    def _check_collision(self, name: str) -> None:
        """Kafka refuses names that differ from an existing one only in '.' versus '_': their
        metric names would be the same."""
        folded = name.replace(".", "_")
        for existing in self.client.get_children(znodes.BROKER_TOPICS):
            if existing != name and existing.replace(".", "_") == folded:
                raise InvalidTopicError(f"Topic '{name}' collides with existing topics: {existing}")

    def delete_topic(self, name: str) -> TopicInfo:
        """Ask the controller to delete `name`; the topic goes once it has done so."""
        info = self.topic(name) or self.refresh_topic(name)
        if info is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        with contextlib.suppress(NodeExistsError):
            self.client.create(znodes.delete_request_path(name))
        with self._lock:
            self._deleting.add(name)
        return info

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> TopicInfo:
        info = self.topic(name)
        if info is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        transaction = self.client.transaction()
        transaction.set_data(znodes.topic_config_path(name), znodes.encode_topic_config(configs))
        transaction.create(
            f"{znodes.CONFIG_CHANGES}/{znodes.CONFIG_CHANGE_PREFIX}",
            znodes.encode_config_change(name),
            sequence=True,
        )
        results = transaction.commit()
        failure = next((r for r in results if isinstance(r, Exception)), None)
        if isinstance(failure, NoNodeError):
            raise UnknownTopicError(f"topic {name!r} does not exist")
        if failure is not None:
            raise failure
        with self._lock:
            self._configs[name] = dict(configs)
            updated = self._info(name)
        assert updated is not None
        return updated

    def add_partitions(
        self, name: str, total: int, replicas: Sequence[Sequence[int]] | None = None
    ) -> TopicInfo:
        path = znodes.topic_path(name)
        try:
            data, stat = self.client.get(path)
        except NoNodeError:
            raise UnknownTopicError(f"topic {name!r} does not exist") from None
        current = znodes.parse_assignment(name, data)
        count = len(current.partitions)
        if total <= count:
            raise InvalidPartitionsError(
                f"topic {name!r} has {count} partitions; {total} is not more"
            )
        if replicas is None or len(replicas) != total - count:
            raise InvalidPartitionsError(f"topic {name!r} needs {total - count} replica lists")
        grown = dict(current.partitions)
        grown.update({count + i: tuple(r) for i, r in enumerate(replicas)})
        assignment = dataclasses.replace(current, partitions=grown)  # reassignments kept
        try:
            self.client.set(path, znodes.encode_assignment(assignment), version=stat.version)
        except BadVersionError:
            raise InvalidPartitionsError(
                f"topic {name!r} changed while its partitions were being added; try again"
            ) from None
        with self._lock:
            self._assignments[name] = assignment
            info = self._info(name)
        assert info is not None
        return info

    def allocate_producer_ids(self) -> range:
        while True:
            try:
                data, stat = self.client.get(znodes.PRODUCER_ID_BLOCK)
            except NoNodeError:
                data, stat = None, None
            first = znodes.parse_producer_block_end(data) + 1
            last = first + PRODUCER_ID_BLOCK - 1
            block = znodes.encode_producer_block(-1, first, last)
            try:
                if stat is None:
                    self.client.create(znodes.PRODUCER_ID_BLOCK, block)
                else:
                    self.client.set(znodes.PRODUCER_ID_BLOCK, block, version=stat.version)
            except (NodeExistsError, BadVersionError):
                continue  # another broker took a block at the same time
            return range(first, last + 1)
