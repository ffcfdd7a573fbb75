"""The stream reader of ``format("weir-log-files")`` (see ``weir.pipeline.log_files``): the
``weir`` stream's planning, with tasks that parse and write their records."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import InputPartition

from weir.pipeline.dedupe import DedupeKey
from weir.pipeline.options import SourceOptions
from weir.pipeline.planning import read_partition
from weir.pipeline.streaming import WeirStreamReader


class LogFilesStreamReader(WeirStreamReader):
    """``weir``'s stream reader whose tasks parse and write their records and return manifests;
    with a ``dedupe`` key they drop the copies among them (and read the key's headers)."""

    def __init__(
        self,
        options: SourceOptions,
        spool: Path,
        formats: tuple[str, ...] = (),
        dedupe: str | None = None,
    ) -> None:
        super().__init__(options)
        self.spool = spool
        self.formats = formats
        self.dedupe = dedupe
        self.headers = DedupeKey.parse(dedupe).header_names if dedupe is not None else ()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from weir.pipeline.task_files import write_task

        # The records' timestamps give lines without a year theirs.
        records = read_partition(
            self.options, partition, include_timestamps=True, header_values=self.headers
        )
        return write_task(str(self.spool), self.formats, self.dedupe)(records)
