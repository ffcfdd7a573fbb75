"""The log loader on its own: the directory put in order before anything is opened (leftovers of
compaction, deletion and spare segments removed, orphan indexes reported), a scan of only the
segments past the recovery point after an unclean stop, and a report of what it found."""

from __future__ import annotations

from pathlib import Path

from storage_helpers import OpenLog, batch

from weir.clock import FakeClock
from weir.storage import LogConfig
from weir.storage.leader_epoch import LeaderEpochCache
from weir.storage.log_loader import LoadReport, LogLoader
from weir.storage.txn_state import TransactionFiles

SMALL = LogConfig(segment_bytes=600, index_interval_bytes=100)


def load(directory: Path, clock: FakeClock, **kwargs: int | bool) -> tuple[list[int], LoadReport]:
    report = LoadReport()
    loader = LogLoader(
        directory,
        SMALL,
        clock,
        epoch_cache=LeaderEpochCache(directory / "leader-epoch-checkpoint"),
        txn_files=TransactionFiles(directory, report.problems),
        report=report,
    )
    loaded = loader.load(**{"recovery_point": 0, "log_start_offset": 0, **kwargs})  # type: ignore[arg-type]
    bases = [segment.base_offset for segment in loaded.segments]
    for segment in loaded.segments:
        segment.close()
    return bases, report


def written_log(open_log: OpenLog) -> tuple[Path, list[int]]:
    """A closed log of several segments: its directory and their base offsets."""
    log = open_log(SMALL)
    for i in range(30):
        log.append(batch([b"%03d" % i * 20]), leader_epoch=0)
    bases = [s.base_offset for s in log.segments]
    log.close()
    return log.directory, bases


def test_leftovers_go_and_an_index_without_its_log_is_reported(
    open_log: OpenLog, clock: FakeClock
) -> None:
    directory, bases = written_log(open_log)
    leftovers = ["00000000000000000999.log.cleaned", "00000000000000000998.log.deleted",
                 "00000000000000000997.log.next", "00000000000000000997.index.next",
                 "recovery-point-offset-checkpoint.tmp"]  # fmt: skip
    for name in leftovers:
        (directory / name).write_bytes(b"x")
    (directory / "00000000000000000996.index").write_bytes(b"\0" * 8)
    loaded, report = load(directory, clock, clean_shutdown=True)
    assert loaded == bases
    assert not [name for name in leftovers if (directory / name).exists()]
    assert not (directory / "00000000000000000996.index").exists()
    assert report.problems == ["removed 00000000000000000996.index: its log is gone"]
    assert report.recovered_segments == 0


def test_an_unclean_load_scans_only_the_segments_past_the_recovery_point(
    open_log: OpenLog, clock: FakeClock
) -> None:
    directory, bases = written_log(open_log)
    assert len(bases) >= 4
    loaded, report = load(directory, clock, recovery_point=bases[-2], clean_shutdown=False)
    assert loaded == bases
    assert report.recovered_segments == 2 and report.truncated_bytes == 0
    _, everything = load(directory, clock, recovery_point=0, clean_shutdown=False)
    assert everything.recovered_segments == len(bases)


def test_a_torn_tail_is_cut_and_reported(open_log: OpenLog, clock: FakeClock) -> None:
    directory, bases = written_log(open_log)
    last = directory / f"{bases[-1]:020d}.log"
    size = last.stat().st_size
    with last.open("r+b") as file:
        file.truncate(size - 7)
    loaded, report = load(directory, clock, recovery_point=bases[-1], clean_shutdown=False)
    assert loaded == bases
    assert report.truncated_bytes > 0 and len(report.problems) == 1
    assert report.problems[0].startswith(f"{last.name}: dropped")
