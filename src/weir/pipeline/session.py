"""A SparkSession for weir's jobs: Python workers run this interpreter, ``weir`` is registered.

PySpark starts its Python workers with ``$PYSPARK_PYTHON`` (default ``python3``), which would
miss a virtualenv's packages; the session therefore points it at the running interpreter unless
the caller has chosen one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

from weir.pipeline.source import register


def weir_session(
    *, master: str, app_name: str, config: Mapping[str, str] | None = None
) -> SparkSession:
    """A session on ``master`` with ``format("weir")`` registered and the UI off by default."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
    )
    for key, value in (config or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
