"""What a log ETL run has read, from its streaming query's progress reports."""

from __future__ import annotations

import json

from weir.cli.etl_progress import offsets_read, read_offsets


def test_the_end_offsets_of_every_partition_are_read() -> None:
    progress = {"sources": [{"endOffset": json.dumps({"logs.raw": {"0": 10, "1": 5, "2": 0}})}]}
    assert read_offsets(progress) == {("logs.raw", 0): 10, ("logs.raw", 1): 5, ("logs.raw", 2): 0}
    assert offsets_read(progress) == 15
    assert offsets_read({"sources": [{"endOffset": {"t": {"0": 7}}}]}) == 7


def test_no_progress_yet_is_nothing_read() -> None:
    assert offsets_read(None) == 0
    assert offsets_read({"sources": [{"endOffset": None}]}) == 0
