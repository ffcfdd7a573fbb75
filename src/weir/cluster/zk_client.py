"""The ZooKeeper operations the controller uses, behind one interface (Kafka's ZooKeeperClient).

`ZooKeeper` is every read, write, multi-operation transaction and watch the controller needs;
`KazooZooKeeper` is its engine on a live session (a `ZooKeeperMetadataStore`'s kazoo client),
and `weir.cluster.zk_memory.InMemoryZooKeeper` the engine tests run on. Kazoo's exceptions and
stats are translated here, once, into this module's: `ZooKeeperError` and its subclasses,
`ZnodeStat`. Nothing above this module imports kazoo.

Watches follow kazoo's recipes: a data watch calls back with the znode's data and stat (None,
None once it is gone) at once and on every change; a children watch with the child names. A
callback that returns False is not called again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kazoo.exceptions import BadVersionError as _KazooBadVersion
from kazoo.exceptions import KazooException
from kazoo.exceptions import NodeExistsError as _KazooNodeExists
from kazoo.exceptions import NoNodeError as _KazooNoNode
from kazoo.exceptions import NotEmptyError as _KazooNotEmpty
from kazoo.exceptions import RolledBackError as _KazooRolledBack
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

if TYPE_CHECKING:
    from weir.cluster.zookeeper import ZooKeeperMetadataStore

#: `version` that matches any version of a znode
ANY_VERSION = -1


class ZooKeeperError(Exception):
    """ZooKeeper refused an operation, or could not be reached (connection or session lost)."""


class NoNodeError(ZooKeeperError):
    pass


class NodeExistsError(ZooKeeperError):
    pass


class BadVersionError(ZooKeeperError):
    pass


class NotEmptyError(ZooKeeperError):
    pass


class RolledBackError(ZooKeeperError):
    """An operation of a transaction that was undone because another of its operations failed."""


@dataclass(frozen=True, slots=True)
class ZnodeStat:
    version: int
    #: the id of the transaction that created the znode (a broker registration's epoch)
    czxid: int
    #: the session that owns an ephemeral znode; 0 for a persistent one
    ephemeral_owner: int


@dataclass(frozen=True, slots=True)
class CheckVersion:
    path: str
    version: int


@dataclass(frozen=True, slots=True)
class CreateNode:
    path: str
    data: bytes = b""
    #: owned by the session that runs the transaction, and gone with it
    ephemeral: bool = False


@dataclass(frozen=True, slots=True)
class SetData:
    path: str
    data: bytes
    version: int = ANY_VERSION


@dataclass(frozen=True, slots=True)
class DeleteNode:
    path: str
    version: int = ANY_VERSION


Op = CheckVersion | CreateNode | SetData | DeleteNode
#: per operation of a transaction: its new stat (SetData), None (done) or the error it met
OpResult = ZnodeStat | ZooKeeperError | None
DataCallback = Callable[[bytes | None, ZnodeStat | None], bool | None]
ChildrenCallback = Callable[[list[str]], bool | None]


class PendingResults(Protocol):
    def get(self) -> list[OpResult]:
        """Wait for a transaction's results."""
        ...


class ZooKeeper(Protocol):
    """The ZooKeeper operations of the controller. Methods block on ZooKeeper; callbacks run
    on the engine's own thread (kazoo's event thread, or the caller's in memory)."""

    @property
    def session_id(self) -> int: ...

    def add_session_listener(self, listener: Callable[[str], None]) -> None:
        """`listener("lost")` when the session expires, `("registered")` once this broker is
        registered again on a new session."""
        ...

    def get(self, path: str) -> tuple[bytes, ZnodeStat]: ...

    def exists(self, path: str) -> ZnodeStat | None: ...

    def get_children(self, path: str) -> list[str]: ...

    def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False) -> None: ...

    def set(self, path: str, data: bytes, version: int = ANY_VERSION) -> ZnodeStat: ...

    def delete(self, path: str, version: int = ANY_VERSION) -> None: ...

    def ensure_path(self, path: str) -> None: ...

    def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        """Run `ops` as one transaction: all are applied, or none."""
        ...

    def multi_async(self, ops: Sequence[Op]) -> PendingResults:
        """`multi`, sent at once; many can be in flight before their results are awaited."""
        ...

    def watch_data(self, path: str, callback: DataCallback) -> None: ...

    def watch_children(self, path: str, callback: ChildrenCallback) -> None: ...


def _error(exc: Exception) -> ZooKeeperError:
    if isinstance(exc, ZooKeeperError):
        return exc
    for kazoo_type, ours in (
        (_KazooNoNode, NoNodeError),
        (_KazooNodeExists, NodeExistsError),
        (_KazooBadVersion, BadVersionError),
        (_KazooNotEmpty, NotEmptyError),
        (_KazooRolledBack, RolledBackError),
    ):
        if isinstance(exc, kazoo_type):
            return ours(str(exc))
    return ZooKeeperError(repr(exc))


def _stat(stat: Any) -> ZnodeStat:
    return ZnodeStat(int(stat.version), int(stat.czxid), int(stat.ephemeralOwner))


def _results(raw: list[Any]) -> list[OpResult]:
    out: list[OpResult] = []
    for result in raw:
        if isinstance(result, Exception):
            out.append(_error(result))
        elif hasattr(result, "version"):
            out.append(_stat(result))
        else:
            out.append(None)
    return out


class _KazooPending:
    def __init__(self, async_result: Any) -> None:
        self._result = async_result

    def get(self) -> list[OpResult]:
        try:
            return _results(self._result.get())
        except KazooException as exc:
            raise _error(exc) from exc


class KazooZooKeeper:
    """`ZooKeeper` on a `ZooKeeperMetadataStore`'s kazoo client and session.

    Thread-safety (docs/threads.md): any thread; kazoo serialises requests on its connection."""

    def __init__(self, store: ZooKeeperMetadataStore) -> None:
        self._store = store
        self._client = store.client

    @property
    def session_id(self) -> int:
        return self._store.session_id

    def add_session_listener(self, listener: Callable[[str], None]) -> None:
        self._store.add_session_listener(listener)

    def get(self, path: str) -> tuple[bytes, ZnodeStat]:
        try:
            data, stat = self._client.get(path)
        except KazooException as exc:
            raise _error(exc) from exc
        return data, _stat(stat)

    def exists(self, path: str) -> ZnodeStat | None:
        try:
            stat = self._client.exists(path)
        except KazooException as exc:
            raise _error(exc) from exc
        return None if stat is None else _stat(stat)

    def get_children(self, path: str) -> list[str]:
        try:
            return list(self._client.get_children(path))
        except KazooException as exc:
            raise _error(exc) from exc

    def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False) -> None:
        try:
            self._client.create(path, data, ephemeral=ephemeral)
        except KazooException as exc:
            raise _error(exc) from exc

    def set(self, path: str, data: bytes, version: int = ANY_VERSION) -> ZnodeStat:
        try:
            return _stat(self._client.set(path, data, version=version))
        except KazooException as exc:
            raise _error(exc) from exc

    def delete(self, path: str, version: int = ANY_VERSION) -> None:
        try:
            self._client.delete(path, version=version)
        except KazooException as exc:
            raise _error(exc) from exc

    def ensure_path(self, path: str) -> None:
        try:
            self._client.ensure_path(path)
        except KazooException as exc:
            raise _error(exc) from exc

    def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        return self.multi_async(ops).get()

    def multi_async(self, ops: Sequence[Op]) -> PendingResults:
        transaction = self._client.transaction()
        for op in ops:
            match op:
                case CheckVersion(path, version):
                    transaction.check(path, version)
                case CreateNode(path, data, ephemeral):
                    transaction.create(path, data, ephemeral=ephemeral)
                case SetData(path, data, version):
                    transaction.set_data(path, data, version)
                case DeleteNode(path, version):
                    transaction.delete(path, version)
        try:
            return _KazooPending(transaction.commit_async())
        except KazooException as exc:
            raise _error(exc) from exc

    def watch_data(self, path: str, callback: DataCallback) -> None:
        def changed(data: bytes | None, stat: Any) -> bool | None:
            return callback(data, None if stat is None else _stat(stat))

        try:
            DataWatch(self._client, path, changed)
        except KazooException as exc:
            raise _error(exc) from exc

    def watch_children(self, path: str, callback: ChildrenCallback) -> None:
        try:
            ChildrenWatch(self._client, path, callback, send_event=False)
        except KazooException as exc:
            raise _error(exc) from exc
