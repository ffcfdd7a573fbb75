"""The Spark home view that lets PySpark's workers import the installed package."""

from __future__ import annotations

from pathlib import Path

from weir.pipeline.session import spark_home_view


def _installation(root: Path) -> Path:
    installed = root / "site-packages" / "pyspark"
    for directory in ("bin", "jars", "python/lib", "sbin"):
        (installed / directory).mkdir(parents=True)
    (installed / "bin" / "spark-class").write_text("#!/bin/sh\n")
    (installed / "python" / "lib" / "pyspark.zip").write_bytes(b"zip")
    (installed / "__init__.py").write_text("")
    return installed


def test_the_view_links_everything_but_the_python_directory(tmp_path: Path) -> None:
    installed = _installation(tmp_path)
    home = spark_home_view(installed, tmp_path / "cache")

    assert home is not None
    assert sorted(p.name for p in home.iterdir()) == ["__init__.py", "bin", "jars", "sbin"]
    assert (home / "bin").resolve() == (installed / "bin").resolve()
    assert (home / "bin" / "spark-class").read_text() == "#!/bin/sh\n"
    assert not (home / "python").exists()
    assert spark_home_view(installed, tmp_path / "cache") == home
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [home.name]


def test_no_view_without_jars_or_where_the_cache_cannot_be_written(tmp_path: Path) -> None:
    assert spark_home_view(tmp_path / "elsewhere", tmp_path / "cache") is None
    installed = _installation(tmp_path)
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert spark_home_view(installed, blocked / "cache") is None
