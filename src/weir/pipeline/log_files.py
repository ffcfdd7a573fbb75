"""``readStream.format("weir-log-files")``: the log ETL's stream, whose tasks write the files.

A micro-batch stream over the same offsets as ``readStream.format("weir")`` (the same options,
offsets in the checkpoint, ``maxRecordsPerTrigger``, available-now triggers, data-loss
handling), but each task, instead of handing its raw records to Spark, parses them and writes
them as Parquet under the ``spool`` directory (see ``weir.pipeline.task_files``). Its rows are
the tasks' manifests: the files each wrote and its line counts. The records thus never pass
through the JVM: a row crossing from Python to the JVM and back to Python cost more than
parsing it.

The parser and the Parquet writing (``weir.pipeline.task_files``) are imported only where they
run: the Python processes that Spark starts to plan the stream's micro-batches need neither,
and importing them took each about half a second.

The spool belongs to one job: the driver deletes the files there that no successful task of a
batch reported (left by failed attempts), and its commit moves the reported ones into the
tables (see ``weir.pipeline.logs_job``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from weir.pipeline.manifest import MANIFEST
from weir.pipeline.offsets import OffsetOptionError
from weir.pipeline.options import SourceOptions
from weir.pipeline.planning import read_partition
from weir.pipeline.streaming import WeirStreamReader

FORMAT = "weir-log-files"
SPOOL_OPTION = "spool"


class LogFilesDataSource(DataSource):
    """The stream of the log ETL job; a batch read is not offered."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return MANIFEST

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = dict(self.options)
        spool = next((options.pop(k) for k in list(options) if k.lower() == SPOOL_OPTION), None)
        if not spool:
            raise OffsetOptionError(f"the option {SPOOL_OPTION} is required")
        return LogFilesStreamReader(SourceOptions.parse(options), Path(spool))


class LogFilesStreamReader(WeirStreamReader):
    """``weir``'s stream reader whose tasks parse and write their records and return manifests."""

    def __init__(self, options: SourceOptions, spool: Path) -> None:
        super().__init__(options)
        self.spool = spool

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from weir.pipeline.task_files import write_task

        records = read_partition(self.options, partition, include_timestamps=False)
        return write_task(str(self.spool))(records)
