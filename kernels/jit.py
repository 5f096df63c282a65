"""Numba flags, from one place. Cycle counts must be exact: no fastmath anywhere in the model."""

import hashlib
import os
from pathlib import Path

import numba
import numpy as np

# cache: compiled kernels are reused across processes (first compile takes seconds).
# nogil: batches may also run on Python threads (Dask workers).
JIT_FLAGS = dict(cache=True, nogil=True, fastmath=False, error_model="numpy")

# Where the compiled kernels are cached, unless NUMBA_CACHE_DIR says otherwise: a user cache
# directory, not Numba's default `__pycache__` beside the source. Inside site-packages that
# folder outlives `pip uninstall`, and a later `pip install -e` of the same package is then
# shadowed by the leftover directory (an empty namespace package named ubepsim). Numba keys the
# cache by the source file's path and stamp, so installs and versions do not mix.
def _user_cache() -> str:
    try:
        return str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ubepsim")
    except RuntimeError:  # no home directory: Numba's own choice
        return ""


CACHE_DIR = _user_cache()


def _sources() -> str:
    """A digest of every kernel module's source. Numba invalidates a cached function when its
    own file changes, not when a function it calls or a constant it reads in another module
    does: the stages are split over modules, so their cache is keyed by all of them at once."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).resolve().parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


SOURCES = _sources()


def njit(*args, **kw):
    """numba.njit with JIT_FLAGS, as a bare decorator or with options."""
    flags = {**JIT_FLAGS, **kw}
    if len(args) == 1 and callable(args[0]) and not kw:
        return _compile(numba.njit(**flags), args[0])
    return lambda f: _compile(numba.njit(*args, **flags), f)


def _compile(decorate, f):
    # Numba picks a function's cache directory when it is decorated, from its global config:
    # set it for this call only, so that other Numba code in the process keeps its own.
    saved = numba.config.CACHE_DIR
    base = saved or CACHE_DIR
    numba.config.CACHE_DIR = os.path.join(base, SOURCES) if base else base
    try:
        return decorate(f)
    finally:
        numba.config.CACHE_DIR = saved


@njit(inline="always")
def u(i):
    """An index as unsigned: Numba then skips the wraparound of negative indices, a few
    instructions on every dependent load of the event loops (indices there are never negative)."""
    return np.uint64(i)
