"""Finding the user's handler from a `MODULE:FUNCTION` reference.

Owns `load_handler`. MODULE is a dotted module importable from the current directory, or a path
to a .py file; FUNCTION is an attribute of it (dots allowed: `module:Class.method`). Process
workers call this too, in each child, since a function from a file cannot be pickled by name.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from weir.consumer.record import Record

Handler = Callable[[Record], object]


class HandlerNotFoundError(Exception):
    pass


def load_handler(reference: str) -> Handler:
    module_name, sep, function_name = reference.rpartition(":")
    if not sep or not module_name or not function_name:
        raise HandlerNotFoundError(f"expected MODULE:FUNCTION, got {reference!r}")
    target: object = _load_module(module_name)
    for part in function_name.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise HandlerNotFoundError(f"{module_name} has no {function_name!r}") from None
    if not callable(target):
        raise HandlerNotFoundError(f"{reference} is not callable")
    return target


def _load_module(name: str) -> ModuleType:
    if name.endswith(".py") or os.sep in name:
        return _load_file(Path(name))
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            raise HandlerNotFoundError(f"no module named {name!r}") from None
        raise


def _load_file(path: Path) -> ModuleType:
    path = path.resolve()
    if not path.is_file():
        raise HandlerNotFoundError(f"no such file: {path}")
    name = f"weir_handler_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.parent))  # so the file can import its neighbours
    spec.loader.exec_module(module)
    return module
