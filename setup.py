"""The compiled part of weir, built from source by `pip install`: the per-record walk of
produced batches (see src/weir/records/_records_walk.c). Everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "weir.records._records_walk",
            ["src/weir/records/_records_walk.c"],
            extra_compile_args=["-O2", "-Wall", "-Werror"],
        )
    ]
)
