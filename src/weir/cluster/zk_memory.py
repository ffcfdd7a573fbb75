"""ZooKeeper in memory, for tests and benches: the `weir.cluster.zk_client.ZooKeeper` interface
without a server.

`InMemoryZooKeeper` is the ensemble: a tree of znodes, each with its data, version, creating
transaction id (czxid) and ephemeral owner. `session()` opens a client session on it
(`InMemorySession`, the `ZooKeeper` interface). It behaves as ZooKeeper does where the
controller depends on it: a znode is created only under an existing parent and only once;
conditional writes and deletes check the version; a znode with children cannot be deleted;
a transaction applies all its operations or none, reporting the failing operation's error and
`RolledBackError` for the others; ephemeral znodes go with their session (`expire`), and the
session's listeners hear "lost". Watches fire after every change, synchronously on the thread
that made it.

Thread-safety (docs/threads.md): any thread; one lock guards the tree, and callbacks run outside it.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from weir.cluster.zk_client import (
    ANY_VERSION,
    BadVersionError,
    CheckVersion,
    ChildrenCallback,
    CreateNode,
    DataCallback,
    DeleteNode,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    OpResult,
    RolledBackError,
    SetData,
    ZnodeStat,
    ZooKeeperError,
)


@dataclass(slots=True)
class _Znode:
    data: bytes
    czxid: int
    owner: int = 0
    version: int = 0
    children: set[str] = field(default_factory=set)

    def stat(self) -> ZnodeStat:
        return ZnodeStat(self.version, self.czxid, self.owner)


DATA, CHILDREN = "data", "children"
#: what a write changed: (DATA, path) or (CHILDREN, path)
_Change = tuple[str, str]
_Changes = set[_Change]


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def _name(path: str) -> str:
    return path.rsplit("/", 1)[1]


class _Resolved:
    def __init__(self, results: list[OpResult]) -> None:
        self._results = results

    def get(self) -> list[OpResult]:
        return self._results


class InMemoryZooKeeper:
    """The ensemble: znodes, sessions and their watches.

    Thread-safety (docs/threads.md): any thread; `_lock` guards the tree and the sessions."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._nodes: dict[str, _Znode] = {"/": _Znode(b"", 0)}
        self._zxid = itertools.count(1)
        self._session_ids = itertools.count(0x1000)
        self._sessions: dict[int, InMemorySession] = {}

    def session(self) -> InMemorySession:
        session = InMemorySession(self)
        return session

    def _open(self, session: InMemorySession) -> int:
        with self._lock:
            session_id = next(self._session_ids)
            self._sessions[session_id] = session
            return session_id

    def expire(self, session: InMemorySession) -> None:
        """End `session` as ZooKeeper does when it times out: its ephemeral znodes go (their
        watches fire), its listeners hear "lost", and it reconnects on a new session."""
        with self._lock:
            old = session.session_id
            self._sessions.pop(old, None)
            mine = [p for p, n in self._nodes.items() if n.owner == old]
            changed: _Changes = set()
            for path in sorted(mine, reverse=True):
                changed |= self._remove(path)
        session._reconnected(self._open(session))
        self._fire(changed)
        session._notify("lost")

    # ---- the tree (callers hold the lock) --------------------------------------------------------

    def _node(self, path: str) -> _Znode:
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        return node

    def _check(self, path: str, version: int) -> _Znode:
        node = self._node(path)
        if version != ANY_VERSION and version != node.version:
            raise BadVersionError(f"{path}: version {node.version}, not {version}")
        return node

    def _add(self, path: str, data: bytes, owner: int) -> _Changes:
        if path in self._nodes:
            raise NodeExistsError(path)
        parent = self._node(_parent(path))
        self._nodes[path] = _Znode(data, next(self._zxid), owner)
        parent.children.add(_name(path))
        return {(DATA, path), (CHILDREN, _parent(path))}

    def _write(self, path: str, data: bytes, version: int) -> tuple[ZnodeStat, _Changes]:
        node = self._check(path, version)
        node.data, node.version = data, node.version + 1
        return node.stat(), {(DATA, path)}

    def _remove(self, path: str, version: int = ANY_VERSION) -> _Changes:
        node = self._check(path, version)
        if node.children:
            raise NotEmptyError(path)
        del self._nodes[path]
        self._nodes[_parent(path)].children.discard(_name(path))
        return {(DATA, path), (CHILDREN, _parent(path))}

    def _apply(self, op: Op, owner: int) -> tuple[OpResult, _Changes]:
        match op:
            case CheckVersion(path, version):
                self._check(path, version)
                return None, set()
            case CreateNode(path, data, ephemeral):
                return None, self._add(path, data, owner if ephemeral else 0)
            case SetData(path, data, version):
                return self._write(path, data, version)
            case DeleteNode(path, version):
                return None, self._remove(path, version)
        raise AssertionError(op)

    def _multi(self, ops: Sequence[Op], session: int) -> tuple[list[OpResult], _Changes]:
        with self._lock:
            saved: dict[str, _Znode | None] = {}
            results: list[OpResult] = []
            changed: _Changes = set()
            for op in ops:
                for path in (op.path, _parent(op.path)):
                    if path not in saved:
                        node = self._nodes.get(path)
                        saved[path] = None if node is None else _copy(node)
                try:
                    result, touched = self._apply(op, session)
                except ZooKeeperError as exc:
                    self._restore(saved)
                    failed: list[OpResult] = [RolledBackError(o.path) for o in ops]
                    failed[len(results)] = exc
                    return failed, set()
                results.append(result)
                changed |= touched
            return results, changed

    def _restore(self, saved: dict[str, _Znode | None]) -> None:
        for path, node in saved.items():
            if node is None:
                self._nodes.pop(path, None)
            else:
                self._nodes[path] = node

    def _fire(self, changed: _Changes) -> None:
        with self._lock:
            sessions = list(self._sessions.values())
        for session in sessions:
            session._changed(changed)

    def _data(self, path: str) -> tuple[bytes | None, ZnodeStat | None]:
        with self._lock:
            node = self._nodes.get(path)
            return (None, None) if node is None else (node.data, node.stat())

    def _children(self, path: str) -> list[str] | None:
        with self._lock:
            node = self._nodes.get(path)
            return None if node is None else sorted(node.children)


def _copy(node: _Znode) -> _Znode:
    return _Znode(node.data, node.czxid, node.owner, node.version, set(node.children))


class InMemorySession:
    """One client session on an `InMemoryZooKeeper`: the `ZooKeeper` interface.

    Thread-safety (docs/threads.md): any thread (the ensemble's lock)."""

    def __init__(self, ensemble: InMemoryZooKeeper) -> None:
        self._zk = ensemble
        self._id = ensemble._open(self)
        self._listeners: list[Callable[[str], None]] = []
        self._data_watches: dict[str, list[DataCallback]] = {}
        self._child_watches: dict[str, list[ChildrenCallback]] = {}

    @property
    def session_id(self) -> int:
        return self._id

    def add_session_listener(self, listener: Callable[[str], None]) -> None:
        self._listeners.append(listener)

    def registered(self) -> None:
        """Tell the listeners this broker registered again on its new session."""
        self._notify("registered")

    def get(self, path: str) -> tuple[bytes, ZnodeStat]:
        with self._zk._lock:
            node = self._zk._node(path)
            return node.data, node.stat()

    def exists(self, path: str) -> ZnodeStat | None:
        return self._zk._data(path)[1]

    def get_children(self, path: str) -> list[str]:
        children = self._zk._children(path)
        if children is None:
            raise NoNodeError(path)
        return children

    def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False) -> None:
        with self._zk._lock:
            changed = self._zk._add(path, data, self._id if ephemeral else 0)
        self._zk._fire(changed)

    def set(self, path: str, data: bytes, version: int = ANY_VERSION) -> ZnodeStat:
        with self._zk._lock:
            stat, changed = self._zk._write(path, data, version)
        self._zk._fire(changed)
        return stat

    def delete(self, path: str, version: int = ANY_VERSION) -> None:
        with self._zk._lock:
            changed = self._zk._remove(path, version)
        self._zk._fire(changed)

    def ensure_path(self, path: str) -> None:
        parts = path.strip("/").split("/")
        for depth in range(1, len(parts) + 1):
            with contextlib.suppress(NodeExistsError):
                self.create("/" + "/".join(parts[:depth]))

    def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        results, changed = self._zk._multi(ops, self._id)
        self._zk._fire(changed)
        return results

    def multi_async(self, ops: Sequence[Op]) -> _Resolved:
        return _Resolved(self.multi(ops))

    def watch_data(self, path: str, callback: DataCallback) -> None:
        if callback(*self._zk._data(path)) is not False:
            self._data_watches.setdefault(path, []).append(callback)

    def watch_children(self, path: str, callback: ChildrenCallback) -> None:
        children = self._zk._children(path)
        if callback(children or []) is not False:
            self._child_watches.setdefault(path, []).append(callback)

    # ---- called by the ensemble ------------------------------------------------------------------

    def _reconnected(self, session_id: int) -> None:
        self._id = session_id

    def _notify(self, event: str) -> None:
        for listener in list(self._listeners):
            listener(event)

    def _changed(self, changes: _Changes) -> None:
        for kind, path in sorted(changes):
            if kind == DATA:
                for callback in list(self._data_watches.get(path, ())):
                    if callback(*self._zk._data(path)) is False:
                        self._data_watches[path].remove(callback)
                continue
            children = self._zk._children(path)
            for child_callback in list(self._child_watches.get(path, ())):
                if child_callback(children or []) is False:
                    self._child_watches[path].remove(child_callback)
