"""Numba flags, from one place. Cycle counts must be exact: no fastmath anywhere in the model."""

import numba

# cache: compiled kernels are reused across processes (first compile takes seconds).
# nogil: batches may also run on Python threads (Dask workers).
JIT_FLAGS = dict(cache=True, nogil=True, fastmath=False, error_model="numpy")


def njit(*args, **kw):
    return numba.njit(*args, **{**JIT_FLAGS, **kw})
