"""What a log ETL task reports: one row per file it wrote (``FILE``), one for its parsed-rows
file (``PARSED``), one per (parsed, source, minute, level) with its number of lines (``COUNT``),
one per distinct (source, masked message) with its lines, first and last timestamps
(microseconds) and first partition and offset (``TEMPLATE``), and, when the job deduplicates,
one per writer it saw (topic, partition, identity) with its highest position and the copies it
dropped as ``lines`` (``HIGH_WATER``, see ``weir.pipeline.dedupe``), as a Spark schema
(``MANIFEST``; the tasks write it in Arrow as ``weir.pipeline.task_files.MANIFEST_ARROW``).

Apart from ``weir.pipeline.task_files`` because the process that creates the job's source asks
it for this schema alone: it needs neither the parser nor pyarrow.
"""

from __future__ import annotations

from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

FILE, COUNT, PARSED, TEMPLATE, HIGH_WATER = "file", "count", "parsed", "template", "high-water"
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
        StructField("topic", StringType()),
        StructField("identity", BinaryType()),
        StructField("position", LongType()),
    ]
)
