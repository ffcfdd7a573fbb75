"""The records `weir demo` reports its ETL has read, from a streaming query's progress."""

from __future__ import annotations

import json

from weir.cli.pipeline_demo import _offsets_read


def test_the_end_offsets_of_every_partition_are_summed() -> None:
    progress = {"sources": [{"endOffset": json.dumps({"logs.raw": {"0": 10, "1": 5, "2": 0}})}]}
    assert _offsets_read(progress) == 15
    assert _offsets_read({"sources": [{"endOffset": {"t": {"0": 7}}}]}) == 7


def test_no_progress_yet_is_nothing_read() -> None:
    assert _offsets_read(None) == 0
    assert _offsets_read({"sources": [{"endOffset": None}]}) == 0
