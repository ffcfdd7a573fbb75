"""What a log ETL task reports: one row per file it wrote (``FILE``) and one per (parsed,
source, minute, level) with its number of lines (``COUNT``), as a Spark schema (``MANIFEST``)
and the Arrow schema the task writes it in (``MANIFEST_ARROW``).

Apart from ``weir.pipeline.task_files`` because the processes that plan the job's micro-batches
need the schema but not the parser, whose import costs each about half a second.
"""

from __future__ import annotations

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

FILE, COUNT = "file", "count"
MANIFEST = StructType(
    [
        StructField("kind", StringType()),
        StructField("path", StringType()),
        StructField("parsed", IntegerType()),
        StructField("source", StringType()),
        StructField("minute", LongType()),
        StructField("level", StringType()),
        StructField("lines", LongType()),
    ]
)
MANIFEST_ARROW = pa.schema(
    [
        ("kind", pa.string()),
        ("path", pa.string()),
        ("parsed", pa.int32()),
        ("source", pa.string()),
        ("minute", pa.int64()),
        ("level", pa.string()),
        ("lines", pa.int64()),
    ]
)
