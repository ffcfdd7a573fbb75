from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from weir import diskio
from weir.cluster.metadata import METADATA_FILE, EmbeddedMetadataStore


@pytest.fixture(autouse=True)
def no_faults_afterwards() -> Iterator[None]:
    yield
    diskio.install_faults(None)


def test_a_change_the_disk_refuses_changes_nothing(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(tmp_path)
    store.create_topic("kept", 2, {})
    ids = store.allocate_producer_ids()
    before = (tmp_path / METADATA_FILE).read_text()
    diskio.install_faults(diskio.FaultPlan.parse("metadata:write:1+:ENOSPC"))
    with pytest.raises(OSError):
        store.create_topic("new", 1, {})
    with pytest.raises(OSError):
        store.delete_topic("kept")
    with pytest.raises(OSError):
        store.add_partitions("kept", 4)
    with pytest.raises(OSError):
        store.allocate_producer_ids()
    assert sorted(store.topics()) == ["kept"] and store.topics()["kept"].partitions == 2
    assert (tmp_path / METADATA_FILE).read_text() == before
    assert not list(tmp_path.glob("*.tmp"))
    diskio.install_faults(None)
    assert store.allocate_producer_ids().start == ids.stop


def test_opening_an_existing_store_writes_nothing(tmp_path: Path) -> None:
    EmbeddedMetadataStore(tmp_path).create_topic("t", 1, {})
    diskio.install_faults(diskio.FaultPlan.parse("metadata:write:1+:ENOSPC"))
    assert EmbeddedMetadataStore(tmp_path).topic("t") is not None
