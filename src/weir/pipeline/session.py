"""A SparkSession for weir's jobs: Python workers run this interpreter, ``weir`` is registered.

PySpark starts its Python workers with ``$PYSPARK_PYTHON`` (default ``python3``), which would
miss a virtualenv's packages; the session therefore points it at the running interpreter unless
the caller has chosen one.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's zip) first on every Python
worker's path. In a pip installation of PySpark that zip holds the same sources as the installed
package but no bytecode, so each worker process compiles PySpark's modules again (about a second
of CPU; a streaming query starts half a dozen such processes, and every task rescans the zips).
Unless ``SPARK_HOME`` is set, the session therefore runs Spark from a view of the installation
without its ``python`` directory (kept in the user's cache directory): the same scripts and
jars, linked, so workers import the installed package and its cached bytecode.

The driver's JVM maps its classes from a class data sharing archive kept in the same cache
directory, written by the first session's JVM when it exits (see ``weir.pipeline.jvm_classes``):
that saves over two seconds of a session's start and one to two of a streaming query's.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

from weir.pipeline.jvm_classes import archive_options
from weir.pipeline.source import register

PYTHON_DIR = "python"
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
# Hadoop's local file system keeps a ``.crc`` file beside every file it writes: each checkpoint
# entry of a streaming query (two per micro-batch) then costs a second file, written, renamed
# and deleted with it, on a path where metadata operations are the cost. The raw local file
# system writes the files alone, renamed into place as atomically. Spark's own Parquet output
# on ``file:`` paths has no ``.crc`` files either.
LOCAL_FILES_WITHOUT_CHECKSUMS = {
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
}


def weir_session(
    *,
    master: str,
    app_name: str,
    config: Mapping[str, str] | None = None,
    class_archive: bool = True,
) -> SparkSession:
    """A session on ``master`` with ``format("weir")`` registered, the UI off and local files
    written without checksum files by default (``config`` overrides); its driver's JVM uses
    (or, the first time, writes) a class data sharing archive unless ``class_archive`` is
    false. A driver JVM already running in this process keeps the options it started with."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark_home()
    config = dict(config or {})
    archive = class_archive_options() if class_archive else None
    if archive is not None:
        config[DRIVER_JAVA_OPTIONS] = f"{config.get(DRIVER_JAVA_OPTIONS, '')} {archive}".strip()
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
    )
    for key, value in LOCAL_FILES_WITHOUT_CHECKSUMS.items():
        builder = builder.config(key, value)
    for key, value in config.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def spark_home() -> Path:
    """Where weir's sessions run Spark from: ``$SPARK_HOME``, or else the view of the installed
    PySpark (``spark_home_view``), which becomes ``$SPARK_HOME``."""
    if "SPARK_HOME" not in os.environ:
        home = spark_home_view(Path(pyspark.__file__).parent)
        if home is None:
            return Path(pyspark.__file__).parent
        os.environ["SPARK_HOME"] = str(home)
    return Path(os.environ["SPARK_HOME"])


def class_archive_options() -> str | None:
    """The options a new session gives its driver's JVM for the class archive: map it, or
    write it at exit; None when neither (see ``weir.pipeline.jvm_classes.archive_options``)."""
    return archive_options(spark_home(), _cache_dir(), spark_version=pyspark.__version__)


def spark_home_view(installed: Path, cache: Path | None = None) -> Path | None:
    """A directory linking every entry of the pip-installed PySpark at ``installed`` except its
    ``python`` directory, made once per installation under ``cache`` (default:
    ``$XDG_CACHE_HOME/weir``, or ``~/.cache/weir``); None if ``installed`` is not a Spark home
    (no ``jars``) or the cache cannot be written."""
    if not (installed / "jars").is_dir():
        return None
    try:
        return _linked_view(installed, cache if cache is not None else _cache_dir())
    except OSError:
        return None


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "weir"


def _linked_view(installed: Path, root: Path) -> Path:
    digest = hashlib.sha256(str(installed.resolve()).encode()).hexdigest()[:12]
    home = root / f"spark-home-{pyspark.__version__}-{digest}"
    if home.is_dir():
        return home
    root.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{home.name}-", dir=root))
    for entry in installed.iterdir():
        if entry.name != PYTHON_DIR:
            (building / entry.name).symlink_to(entry.resolve())
    try:
        building.rename(home)
    except OSError:
        if not home.is_dir():
            raise
        for link in building.iterdir():
            link.unlink()
        building.rmdir()
    return home
