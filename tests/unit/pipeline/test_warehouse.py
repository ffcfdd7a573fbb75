"""The warehouse's batch commit protocol on a real directory, crash points included."""

from __future__ import annotations

from pathlib import Path

from weir.pipeline.warehouse import BatchCommits


def stage_files(commits: BatchCommits, batch_id: int, names: list[str]) -> None:
    staging = commits.stage(batch_id)
    for name in names:
        path = staging / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(name.encode())
        (path.parent / f".{path.name}.crc").write_bytes(b"checksum")
        (staging / name.split("/")[0] / "_SUCCESS").write_bytes(b"")


def table_files(warehouse: Path) -> list[str]:
    return sorted(
        str(p.relative_to(warehouse))
        for p in warehouse.rglob("*.parquet")
        if not str(p.relative_to(warehouse)).startswith("_")
    )


def test_commit_moves_data_files_and_marks_the_batch(tmp_path: Path) -> None:
    commits = BatchCommits(tmp_path, "query")
    stage_files(commits, 3, ["logs/source=hdfs/date=2024-01-01/hour=5/part-0.parquet",
                             "quarantine/part-0.parquet"])  # fmt: skip
    assert commits.committed(3) is None

    marker = commits.commit(3, {"records": 2})

    assert table_files(tmp_path) == [
        "logs/source=hdfs/date=2024-01-01/hour=5/batch-00000003-part-0.parquet",
        "quarantine/batch-00000003-part-0.parquet",
    ]
    assert commits.committed(3) == marker
    assert marker["records"] == 2 and marker["files"] == table_files(tmp_path)
    assert not (tmp_path / "_staging" / "query" / "3").exists()


def test_a_batch_replayed_after_a_crash_mid_commit_replaces_its_files(tmp_path: Path) -> None:
    commits = BatchCommits(tmp_path, "query")
    stage_files(commits, 0, ["quarantine/part-0.parquet"])
    commits.commit(0, {"records": 1})
    stage_files(commits, 1, ["quarantine/part-a.parquet", "quarantine/part-b.parquet"])
    # The driver dies after the manifest and one rename: the marker is never written.
    pending = tmp_path / "_batches" / "query" / "1.pending"
    pending.write_text('{"files": ["quarantine/batch-00000001-part-a.parquet", '
                       '"quarantine/batch-00000001-part-b.parquet"]}')  # fmt: skip
    staged = tmp_path / "_staging" / "query" / "1" / "quarantine"
    (staged / "part-a.parquet").replace(tmp_path / "quarantine/batch-00000001-part-a.parquet")
    assert commits.committed(1) is None

    stage_files(commits, 1, ["quarantine/part-c.parquet"])
    commits.commit(1, {"records": 2})

    assert table_files(tmp_path) == [
        "quarantine/batch-00000000-part-0.parquet",
        "quarantine/batch-00000001-part-c.parquet",
    ]
    assert not pending.exists()


def test_batches_of_another_query_are_kept_apart(tmp_path: Path) -> None:
    old = BatchCommits(tmp_path, "old-query")
    stage_files(old, 0, ["quarantine/part-0.parquet"])
    old.commit(0, {"records": 1})

    assert BatchCommits(tmp_path, "new-query").committed(0) is None


def test_only_the_files_named_are_committed(tmp_path: Path) -> None:
    """A task attempt that was given up on may still write into staging after the batch's
    files were collected: the commit moves the files it was told about, nothing else."""
    commits = BatchCommits(tmp_path, "query")
    stage_files(commits, 4, ["logs/part-0.parquet", "logs/part-0-attempt-1.parquet"])

    marker = commits.commit(4, {"records": 1}, files=["logs/part-0.parquet"])

    assert table_files(tmp_path) == ["logs/batch-00000004-part-0.parquet"]
    assert marker["files"] == ["logs/batch-00000004-part-0.parquet"]
    assert not (tmp_path / "_staging" / "query" / "4").exists()


def test_files_written_elsewhere_are_moved_in_and_undone_by_a_replay(tmp_path: Path) -> None:
    """The log ETL's tasks write into a spool: the commit takes those files from there, lists
    them in the batch's manifest with the staged ones, and a replay of a batch whose commit was
    cut short removes them from the tables again."""
    commits = BatchCommits(tmp_path, "query")
    stage_files(commits, 5, ["metrics_minute/part-m.parquet"])
    spool = tmp_path / "_staging" / "spool" / "logs" / "source=hdfs"
    spool.mkdir(parents=True)
    (spool / "part-a.parquet").write_bytes(b"a")
    (spool / "part-b.parquet").write_bytes(b"b")
    names = ("part-a.parquet", "part-b.parquet")
    elsewhere = {f"logs/source=hdfs/{name}": spool / name for name in names}

    marker = commits.commit(
        5, {"records": 2}, files=["metrics_minute/part-m.parquet"], elsewhere=elsewhere
    )

    expected = [
        "logs/source=hdfs/batch-00000005-part-a.parquet",
        "logs/source=hdfs/batch-00000005-part-b.parquet",
        "metrics_minute/batch-00000005-part-m.parquet",
    ]
    assert table_files(tmp_path) == expected
    assert sorted(marker["files"]) == expected
    assert not any(spool.iterdir())
    (tmp_path / "_batches" / "query" / "5").replace(tmp_path / "_batches" / "query" / "5.pending")
    commits.stage(5)
    assert table_files(tmp_path) == []


def test_a_state_is_committed_with_its_batch_and_read_back_after_a_restart(tmp_path: Path) -> None:
    commits = BatchCommits(tmp_path, "query")
    assert commits.latest_state(0) is None
    for batch_id in (0, 1):
        stage_files(commits, batch_id, ["logs/part-0.parquet"])
        commits.commit(batch_id, {"records": 1}, state=f"after {batch_id}".encode())
    # Batch 2 staged and crashed before its commit: its replay resumes from batch 1's state.
    stage_files(commits, 2, ["logs/part-0.parquet"])
    restarted = BatchCommits(tmp_path, "query")
    assert restarted.latest_state(2) == b"after 1"
    # Batch 0's state is deleted once batch 1's is committed.
    assert sorted(p.name for p in restarted.markers.glob("*.state")) == ["1.state"]


def test_a_batch_committed_without_a_state_gives_none(tmp_path: Path) -> None:
    commits = BatchCommits(tmp_path, "query")
    stage_files(commits, 0, ["logs/part-0.parquet"])
    commits.commit(0, {"records": 1})
    assert commits.latest_state(5) is None


def test_named_states_are_committed_beside_the_unnamed_one(tmp_path: Path) -> None:
    commits = BatchCommits(tmp_path, "query")
    for batch_id in (0, 1):
        stage_files(commits, batch_id, ["logs/part-0.parquet"])
        commits.commit(batch_id, {"records": 1}, state=f"miner {batch_id}".encode(),
                       states={"high-water": f"positions {batch_id}".encode()})  # fmt: skip
    stage_files(commits, 2, ["logs/part-0.parquet"])
    restarted = BatchCommits(tmp_path, "query")
    assert restarted.latest_state(2) == b"miner 1"
    assert restarted.latest_state(2, "high-water") == b"positions 1"
    assert restarted.latest_state(2, "other") is None
    assert sorted(p.name for p in restarted.markers.glob("*.state")) == [
        "1.high-water.state", "1.state",
    ]  # fmt: skip
    restarted.commit(2, {"records": 1}, state=b"miner 2")  # a batch without the named one
    assert restarted.latest_state(3, "high-water") is None
    assert sorted(p.name for p in restarted.markers.glob("*.state")) == ["2.state"]
