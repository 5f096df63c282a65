"""Writing result files whole or not at all, and TOML values, for the analysis commands."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import InputError


def check_out(path: Path, formats: tuple[str, ...], flag: str = "--out") -> None:
    """An output path the command can write: a known suffix, in a directory that exists."""
    if path.suffix not in formats:
        raise InputError(flag, f"{path}: allowed formats are {', '.join(formats)}")
    if not path.parent.exists():
        raise InputError(flag, f"directory {path.parent} does not exist")


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary path beside `path`, renamed onto it only if the block completes, so a
    reader never finds a half-written file under the final name."""
    tmp = path.with_name(f".{path.name}.tmp{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: Path, text: str) -> None:
    with replacing(path) as tmp:
        tmp.write_text(text)


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else "nan"
    return str(v)
