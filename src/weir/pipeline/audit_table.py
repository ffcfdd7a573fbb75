"""The audit topic `__audit` in the warehouse: the table `audit`, one row per count.

`audit_frame` reads `__audit` to its end with the `weir` source, parses each value
(`weir.protocol.audit_records`, whose declaration gives the columns) and keeps one row per key:
the largest counts, which are the latest, since a broker writes a minute's running counts again
as they grow. Values that are not audit counts are left out. The columns are the declared
fields (`minute_ms`, `broker`, `broker_started_ms`, `principal`, `client_id`, `address`, `api`,
`topic`, `partition`, `bytes`, `records`) and `minute`, the minute as a timestamp.

`load_audit` writes that as Parquet to `<warehouse>/audit`, replacing what an earlier load wrote
(each load is the whole of `__audit`, which compaction keeps to the latest count of each key).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, LongType, StringType, StructField, StructType

from weir.pipeline.source import FORMAT
from weir.protocol.audit_records import AUDIT_TOPIC, COUNT_FIELDS, FIELD_TYPES, KEY_FIELDS

TABLE = "audit"
_SPARK_TYPES: dict[type, DataType] = {int: LongType(), str: StringType()}
#: the value's JSON, as Spark parses it
VALUE_SCHEMA = StructType(
    [StructField(name, _SPARK_TYPES[kind]) for name, kind in FIELD_TYPES.items()]
)


def audit_frame(spark: SparkSession, options: Mapping[str, str]) -> DataFrame:
    """`__audit`, one row per count. `options`: the `weir` source's (`bootstrap.servers`,
    `kafka.`-prefixed client settings)."""
    raw = (
        spark.read.format(FORMAT)
        .options(**options)
        .option("subscribe", AUDIT_TOPIC)
        .option("includeHeaders", "false")
        .load()
    )
    parsed = raw.select(
        F.from_json(F.col("value").cast("string"), VALUE_SCHEMA).alias("count")
    ).select("count.*")
    complete = parsed.dropna(subset=list(FIELD_TYPES))
    latest = complete.groupBy(*KEY_FIELDS).agg(*(F.max(name).alias(name) for name in COUNT_FIELDS))
    return latest.withColumn("minute", F.timestamp_millis(F.col("minute_ms")))


def load_audit(spark: SparkSession, options: Mapping[str, str], warehouse: Path) -> int:
    """Write `__audit` to `<warehouse>/audit` as Parquet, replacing the table; the rows written."""
    frame = audit_frame(spark, options).cache()
    try:
        frame.write.mode("overwrite").parquet(str(warehouse / TABLE))
        return frame.count()
    finally:
        frame.unpersist()
