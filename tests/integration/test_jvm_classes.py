"""The Spark driver's class data sharing archive (weir.pipeline.jvm_classes), with a real JVM:
written at a JVM's exit, adopted by the next session once checked, a truncated one deleted, one
still being written left alone."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from pipeline_spark import require_spark

from waiting import poll
from weir.pipeline.jvm_classes import (
    ARCHIVE_SUFFIX,
    MAP,
    WRITE,
    archive_options,
    being_written,
    java_binary,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
VERSION = "4.0.0"


@pytest.fixture
def spark_home(tmp_path: Path) -> Path:
    require_spark()
    home = tmp_path / "spark"
    (home / "jars").mkdir(parents=True)
    return home


def options_for(home: Path, cache: Path) -> list[str]:
    options = archive_options(home, cache, spark_version=VERSION)
    assert options is not None
    return shlex.split(options)


def run_java(options: list[str]) -> None:
    java = java_binary()
    assert java is not None
    subprocess.run([str(java), *options, "-version"], check=True, capture_output=True)


def partials(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.partial"))


def test_the_first_session_writes_the_archive_and_the_next_uses_it(
    spark_home: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    first = options_for(spark_home, cache)
    [writing] = [o for o in first if o.startswith(WRITE)]
    run_java(first)
    assert partials(cache) == [Path(writing.split("=", 1)[1])]

    second = options_for(spark_home, cache)
    [archive] = cache.glob(f"*{ARCHIVE_SUFFIX}")
    assert f"{MAP}{archive}" in second
    assert partials(cache) == []
    run_java(second)
    assert options_for(spark_home, cache) == second


def test_a_truncated_archive_is_deleted_and_written_again(spark_home: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    run_java(options_for(spark_home, cache))
    [partial] = partials(cache)
    content = partial.read_bytes()
    partial.chmod(0o600)
    partial.write_bytes(content[: len(content) // 3])

    again = options_for(spark_home, cache)
    assert not partial.exists(), "a truncated archive was kept"
    assert list(cache.glob(f"*{ARCHIVE_SUFFIX}")) == []
    assert any(o.startswith(WRITE) for o in again)


def test_no_archive_while_another_jvm_writes_one(spark_home: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = options_for(spark_home, cache)
    [writing] = [o.split("=", 1)[1] for o in first if o.startswith(WRITE)]
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", writing])
    try:
        poll(lambda: being_written(Path(writing)), 10, "the child's command line", interval=0.02)
        # the JVM runs: it writes its archive only as it exits
        assert archive_options(spark_home, cache, spark_version=VERSION) is None
        Path(writing).write_bytes(b"half of an archive")  # it exits, and writes
        assert archive_options(spark_home, cache, spark_version=VERSION) is None
        assert Path(writing).exists(), "a partial archive being written was touched"
    finally:
        process.kill()
        process.wait()
    assert not being_written(Path(writing))


def test_archives_are_per_spark_version_and_jars(spark_home: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    run_java(options_for(spark_home, cache))
    assert archive_options(spark_home, cache, spark_version=VERSION) is not None
    [archive] = cache.glob(f"*{ARCHIVE_SUFFIX}")
    other = archive_options(spark_home, cache, spark_version="4.1.0")
    assert other is not None and WRITE in other
    (spark_home / "jars" / "replaced.jar").write_bytes(b"")
    replaced = archive_options(spark_home, cache, spark_version=VERSION)
    assert replaced is not None and str(archive) not in replaced
