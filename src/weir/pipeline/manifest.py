"""What a log ETL task reports: one row per file it wrote (``FILE``), one for its parsed-rows
file (``PARSED``), one per (parsed, source, minute, level) with its number of lines (``COUNT``)
and one per distinct (source, masked message) with its lines, first and last timestamps
(microseconds) and first partition and offset (``TEMPLATE``), as a Spark schema (``MANIFEST``;
the tasks write it in Arrow as ``weir.pipeline.task_files.MANIFEST_ARROW``).

Apart from ``weir.pipeline.task_files`` because the process that creates the job's source asks
it for this schema alone: it needs neither the parser nor pyarrow.
"""

from __future__ import annotations

from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

FILE, COUNT, PARSED, TEMPLATE = "file", "count", "parsed", "template"
MANIFEST = StructType(
    [
        StructField("kind", StringType()),
        StructField("path", StringType()),
        StructField("parsed", IntegerType()),
        StructField("source", StringType()),
        StructField("minute", LongType()),
        StructField("level", StringType()),
        StructField("lines", LongType()),
        StructField("template", StringType()),
        StructField("first_seen", LongType()),
        StructField("last_seen", LongType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
    ]
)
