"""meta.properties: written where missing, and a directory of another node or cluster refused
before anything in it is touched."""

from __future__ import annotations

from pathlib import Path

import pytest

from weir.broker.meta_properties import (
    FILE,
    InconsistentBrokerIdentityError,
    check_and_write,
    read_properties,
)


def test_it_is_written_where_missing_and_accepted_again(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    check_and_write(dirs, 3, "cluster-x")
    for directory in dirs:
        stored = read_properties(directory / FILE)
        assert stored["broker.id"] == "3" and stored["cluster.id"] == "cluster-x"
    check_and_write(dirs, 3, "cluster-x")


def test_another_nodes_directory_is_refused_and_left_alone(tmp_path: Path) -> None:
    check_and_write([tmp_path / "a"], 1, "cluster-x")
    before = (tmp_path / "a" / FILE).read_bytes()
    with pytest.raises(InconsistentBrokerIdentityError, match="Stored node id 1 doesn't match"):
        check_and_write([tmp_path / "b", tmp_path / "a"], 2, "cluster-x")
    assert (tmp_path / "a" / FILE).read_bytes() == before
    assert not (tmp_path / "b" / FILE).exists(), "nothing written when one directory is refused"


def test_another_clusters_directory_is_refused(tmp_path: Path) -> None:
    check_and_write([tmp_path], 1, "cluster-x")
    with pytest.raises(InconsistentBrokerIdentityError, match="trying to join the wrong cluster"):
        check_and_write([tmp_path], 1, "cluster-y")
