"""Files: a file named in another (relative to it), files written whole or not at all, and TOML
values."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import InputError
from .version import __version__

META = "ubepsim."   # the prefix of ubepsim's keys in a Parquet file's key-value metadata


def beside(source: str, value: str, key: str) -> str:
    """A file named in a grid (a trace, a profile) or in a measurement file: relative to that
    file, as an absolute path, so that the points (the rows' `trace`, the fingerprint a resume
    checks) do not depend on the directory the sweep was started from. A name no file can have
    (a NUL character) is refused as `key`'s."""
    if "\0" in value:
        raise InputError(key, f"{value!r} is no file name: it holds a NUL character", source)
    return str((Path(source).parent / value).resolve())


def check_out(path: Path, formats: tuple[str, ...], flag: str = "--out") -> None:
    """An output path the command can write: a file name with a known suffix, in a directory
    where a file can be created (tried, with the temporary name `replacing` uses), so a run
    never does its work and then fails to save it."""
    if not path.stem or path.suffix not in formats:
        raise InputError(flag, f"{str(path)!r}: expected a file name ending in "
                         f"{' or '.join(formats)}")
    if path.is_dir():
        raise InputError(flag, f"{path} is a directory; give a file name")
    if not path.parent.is_dir():
        state = "is not a directory" if path.parent.exists() else "does not exist"
        raise InputError(flag, f"directory {path.parent} {state}")
    probe = _temporary(path)
    try:
        probe.open("xb").close()
        probe.unlink()
    except FileExistsError:
        pass  # left by a run that was killed; `replacing` overwrites it
    except OSError as e:
        raise InputError(flag, f"cannot write in {path.parent}: {e.strerror or e}") from None


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp{path.suffix}")


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary path beside `path`, renamed onto it only if the block completes, so a
    reader never finds a half-written file under the final name."""
    tmp = _temporary(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_parquet(path: Path, frame, provenance: dict[str, str]) -> None:
    """A polars frame as one Parquet file, whole or not at all, with the ubepsim version and
    `provenance` (keys without the prefix) in its metadata."""
    import pyarrow.parquet as pq

    table = frame.to_arrow()
    meta = {META + k: v for k, v in {"version": __version__, **provenance}.items()}
    with replacing(path) as tmp:
        pq.write_table(table.replace_schema_metadata({**(table.schema.metadata or {}), **meta}),
                       tmp)


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


def is_number(v: Any) -> bool:
    """A number as a TOML file or a filter writes one: an int, or a finite float; not a bool."""
    # an int is finite however large (math.isfinite would raise past the floats' range)
    return isinstance(v, (int, float)) and not isinstance(v, bool) and (
        isinstance(v, int) or math.isfinite(v))
