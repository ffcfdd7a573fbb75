"""The in-memory ZooKeeper behaves as ZooKeeper does where the controller relies on it."""

from __future__ import annotations

import pytest

from weir.cluster.zk_client import (
    BadVersionError,
    CheckVersion,
    CreateNode,
    DeleteNode,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    SetData,
    ZnodeStat,
)
from weir.cluster.zk_memory import InMemoryZooKeeper


@pytest.fixture
def zk() -> InMemoryZooKeeper:
    return InMemoryZooKeeper()


def test_znodes_need_a_parent_exist_once_and_keep_versions(zk: InMemoryZooKeeper) -> None:
    session = zk.session()
    with pytest.raises(NoNodeError):
        session.create("/a/b")
    session.ensure_path("/a/b")
    with pytest.raises(NodeExistsError):
        session.create("/a/b")
    assert session.set("/a/b", b"x", version=0).version == 1
    with pytest.raises(BadVersionError):
        session.set("/a/b", b"y", version=0)
    with pytest.raises(NotEmptyError):
        session.delete("/a")
    session.delete("/a/b", version=1)
    assert session.exists("/a/b") is None
    assert session.get_children("/a") == []


def test_a_transaction_applies_all_or_nothing(zk: InMemoryZooKeeper) -> None:
    session = zk.session()
    session.create("/epoch", b"1")
    session.create("/state", b"old")
    results = session.multi([CheckVersion("/epoch", 0), SetData("/state", b"new", 0)])
    assert results[0] is None and isinstance(results[1], ZnodeStat)
    failed = session.multi([SetData("/state", b"newer", 1), CreateNode("/state"),
                            DeleteNode("/epoch")])  # fmt: skip
    assert isinstance(failed[0], RolledBackError)
    assert isinstance(failed[1], NodeExistsError)
    assert isinstance(failed[2], RolledBackError)
    assert session.get("/state")[0] == b"new"
    assert session.exists("/epoch") is not None
    fenced = session.multi([CheckVersion("/epoch", 7), SetData("/state", b"late")])
    assert isinstance(fenced[0], BadVersionError)
    assert session.get("/state")[0] == b"new"


def test_ephemeral_znodes_go_with_their_session_and_watches_fire(zk: InMemoryZooKeeper) -> None:
    owner, watcher = zk.session(), zk.session()
    owner.create("/ids")
    owner.create("/ids/1", b"me", ephemeral=True)
    seen: list[list[str]] = []
    data: list[bytes | None] = []
    watcher.watch_children("/ids", lambda children: seen.append(children) and None)
    watcher.watch_data("/ids/1", lambda value, _stat: data.append(value) and None)
    events: list[str] = []
    owner.add_session_listener(events.append)
    old_session = owner.session_id
    zk.expire(owner)
    assert seen == [["1"], []]
    assert data == [b"me", None]
    assert events == ["lost"]
    assert owner.session_id != old_session
    assert owner.exists("/ids/1") is None


def test_a_watch_that_answers_false_is_not_called_again(zk: InMemoryZooKeeper) -> None:
    session = zk.session()
    session.create("/x", b"0")
    calls: list[bytes | None] = []

    def once(value: bytes | None, _stat: ZnodeStat | None) -> bool:
        calls.append(value)
        return False

    session.watch_data("/x", once)
    session.set("/x", b"1")
    assert calls == [b"0"]
