"""``readStream.format("weir-log-files")``: the log ETL's stream, whose tasks write the files.

A micro-batch stream over the same offsets as ``readStream.format("weir")`` (the same options,
offsets in the checkpoint, ``maxRecordsPerTrigger``, available-now triggers, data-loss
handling), but each task, instead of handing its raw records to Spark, parses them and writes
them as Parquet under the ``spool`` directory (see ``weir.pipeline.task_files``). Its rows are
the tasks' manifests: the files each wrote and its line counts. The option ``formats`` (a JSON
list of paths) names the job's own format files; ``dedupe`` the key its tasks deduplicate on
(``weir.pipeline.dedupe``), if they do. The records thus never pass through the JVM: a
row crossing from Python to the JVM and back to Python cost more than parsing it.

Each Python process Spark starts for the query imports only what its part needs. The one that
creates the source and asks its schema imports this module alone, without pyarrow or the Kafka
client (``weir.pipeline.log_files_reader`` has the stream reader); those that plan micro-batches
import the reader but not the parser and the Parquet writing, which only the tasks import.

The spool belongs to one job: the driver deletes the files there that no successful task of a
batch reported (left by failed attempts), and its commit moves the reported ones into the
tables (see ``weir.pipeline.logs_job``).
"""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.types import StructType

from weir.pipeline.manifest import MANIFEST
from weir.pipeline.offsets import OffsetOptionError
from weir.pipeline.options import SourceOptions

FORMAT = "weir-log-files"
SPOOL_OPTION = "spool"
FORMATS_OPTION = "formats"  # a JSON list of format files and directories
DEDUPE_OPTION = "dedupe"  # a dedupe key (weir.pipeline.dedupe.DedupeKey.spec)


class LogFilesDataSource(DataSource):
    """The stream of the log ETL job; a batch read is not offered."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return MANIFEST

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from weir.pipeline.log_files_reader import LogFilesStreamReader

        options = dict(self.options)
        spool = next((options.pop(k) for k in list(options) if k.lower() == SPOOL_OPTION), None)
        if not spool:
            raise OffsetOptionError(f"the option {SPOOL_OPTION} is required")
        formats = next((options.pop(k) for k in list(options) if k.lower() == FORMATS_OPTION), "[]")
        dedupe = next((options.pop(k) for k in list(options) if k.lower() == DEDUPE_OPTION), None)
        return LogFilesStreamReader(
            SourceOptions.parse(options), Path(spool), tuple(json.loads(formats)), dedupe
        )
