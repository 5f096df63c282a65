"""Numba flags, from one place. Cycle counts must be exact: no fastmath anywhere in the model."""

import hashlib
import os
from pathlib import Path

import numba
import numpy as np
from llvmlite import ir as llvm_ir
from numba.core import cgutils, types
from numba.extending import intrinsic

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


def sources_digest(directory: Path) -> str:
    """A digest of every module's source under `directory`, subfolders included. Numba
    invalidates a cached function when its own file changes, not when a function it calls or a
    constant it reads in another module does: the stages are split over modules (and inline the
    protocols' steps from `protocols/`), so their cache is keyed by all of them at once. Each
    module counts with its path from `directory`, so that moving one changes the key too."""
    digest = hashlib.sha256()
    for path in sorted(directory.rglob("*.py")):
        name = path.relative_to(directory).as_posix()
        digest.update(name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


SOURCES = sources_digest(Path(__file__).resolve().parent)


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


def _prefetch(typingctx, arr, index):
    """A hint to bring element `index` of a C-contiguous array (counted flat) toward the cache
    for writing: the fabric's loop touches each die's AIV state and stores after the other dies
    ran, and waits less on memory when the next event's state is on its way."""
    if not isinstance(arr, types.Array):
        return None

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        idx = context.cast(builder, args[1], signature.args[1], types.intp)
        size = context.get_constant(types.intp, context.get_abi_sizeof(
            context.get_data_type(signature.args[0].dtype)))
        base = builder.ptrtoint(ary.data, llvm_ir.IntType(64))
        addr = builder.add(base, builder.mul(idx, size))
        i8p = llvm_ir.IntType(8).as_pointer()
        i32 = llvm_ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, llvm_ir.FunctionType(llvm_ir.VoidType(), [i8p, i32, i32, i32]),
            "llvm.prefetch.p0i8")
        builder.call(fn, [builder.inttoptr(addr, i8p), i32(1), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(arr, index), codegen


# uncompiled (NUMBA_DISABLE_JIT: coverage, the invariant tests' faults), a hint is nothing
prefetch = (lambda arr, index: None) if numba.config.DISABLE_JIT else intrinsic(_prefetch)
