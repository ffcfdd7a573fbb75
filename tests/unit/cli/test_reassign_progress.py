"""What `weir reassign verify` and `weir cluster drain` say of the copies under way."""

from __future__ import annotations

import io

from weir.cli.reassign_progress import ProgressReporter, ReplicaCopy, summary


def test_a_copy_is_described_by_its_bytes_against_the_leaders() -> None:
    copy = ReplicaCopy(("t", 0), 4, copied=12_300_000, total=24_600_000)
    assert copy.describe() == "replica 4: 12.3 MB of 24.6 MB (50%)"
    assert ReplicaCopy(("t", 0), 4, None, 10).describe() == "replica 4: size not known yet"
    assert ReplicaCopy(("t", 0), 4, 0, 0).describe() == "replica 4: 0 B of 0 B"


def test_a_copy_past_its_leaders_size_counts_as_whole() -> None:
    assert ReplicaCopy(("t", 0), 4, copied=1_050, total=1_000).share == 1.0


def test_the_summary_counts_moves_done_and_bytes_of_known_copies() -> None:
    copies = [
        ReplicaCopy(("t", 0), 4, copied=500_000, total=1_000_000),
        ReplicaCopy(("t", 1), 4, copied=2_000_000, total=1_000_000),  # counted as whole
        ReplicaCopy(("t", 2), 4, copied=None, total=1_000_000),  # its broker did not answer
    ]
    assert summary(copies, done=3, moves=6) == (
        "3 of 6 partition moves done; 1.5 MB of 2.0 MB copied (75%)"
    )
    assert summary([], done=6, moves=6) == "6 of 6 partition moves done"


def test_the_reporter_speaks_at_once_then_at_most_every_interval() -> None:
    out = io.StringIO()
    looks = iter(["first", "second"])
    reporter = ProgressReporter(lambda: next(looks), out)
    reporter.tick()
    reporter.tick()  # within the interval: nothing looked at, nothing said
    assert out.getvalue() == "first\n"
