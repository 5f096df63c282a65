"""Routing traces: a routing read from a Parquet file (rank, token, k, expert), checked whole
before any work, and read once per file as it stands."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np

from ..errors import InputError

TRACE_COLUMNS = ("rank", "token", "k", "expert")


def read_trace(path: str, ranks: int, batch: int, topk: int, experts: int,
               source: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Routing from a Parquet trace: (experts, tokens), experts an int64 array [ranks x batch,
    topk] of each token's expert ids, rank by rank and token by token, and tokens each rank's
    token count. A rank's tokens are 0 .. n - 1, n its own (a trace carries its batches:
    `batch` is their mean)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not Path(path).is_file():
        raise InputError("trace", f"{path} is not a file" if Path(path).exists()
                         else f"no such file {path}", source)
    try:
        table = pq.read_table(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for unreadable files
        raise InputError("trace", f"cannot read {path} as Parquet: {e}", source) from None
    missing = [c for c in TRACE_COLUMNS if c not in table.column_names]
    if missing:
        raise InputError("trace", f"{path} lacks column(s) {', '.join(missing)}; a trace has "
                         f"{', '.join(TRACE_COLUMNS)}", source)
    for c in TRACE_COLUMNS:  # ids, taken as they are: never rounded, parsed or filled in
        column = table.column(c)
        if not pa.types.is_integer(column.type) or column.null_count:
            raise InputError("trace", f"{path}: column {c} must hold integers without nulls, "
                             f"got {column.type}" + (f" with {column.null_count} null(s)"
                                                     if column.null_count else ""), source)
    cols = {c: table.column(c).to_numpy().astype(np.int64) for c in TRACE_COLUMNS}
    n = ranks * batch * topk
    if len(cols["rank"]) != n:
        raise InputError("trace", f"{path} has {len(cols['rank'])} rows; ranks x batch x topk "
                         f"= {n} (batch: the mean tokens per rank)", source)
    for c, hi in (("rank", ranks), ("token", ranks * batch), ("k", topk), ("expert", experts)):
        v = cols[c]
        if v.min() < 0 or v.max() >= hi:
            raise InputError("trace", f"{path}: column {c} must lie in [0, {hi})", source)
    # each rank's tokens: one more than its largest token id (0 without rows)
    tokens = np.zeros(ranks, dtype=np.int64)
    np.maximum.at(tokens, cols["rank"], cols["token"] + 1)
    first = np.concatenate([[0], np.cumsum(tokens)[:-1]])   # where each rank's tokens start
    at = first[cols["rank"]] + cols["token"]
    flat = at * topk + cols["k"]
    # (rank, token, k) once each, and as many rows as the ranks' tokens need: every token of
    # every rank, 0 .. n - 1, has all topk of its copies
    if len(np.unique(flat)) != len(flat) or tokens.sum() * topk != len(flat):
        raise InputError("trace", f"{path}: each (rank, token, k) must appear exactly once, "
                         f"each rank's tokens numbered from 0 without gaps", source)
    routing = np.empty(n, dtype=np.int64)
    routing[flat] = cols["expert"]
    routing = routing.reshape(ranks * batch, topk)
    s = np.sort(routing, axis=1)
    if topk > 1 and (s[:, 1:] == s[:, :-1]).any():
        raise InputError("trace", f"{path}: a token's experts must be distinct", source)
    return routing, tokens


def check_trace_file(path: str, ranks: int, batch: int, topk: int, experts: int,
                     source: str | None = None) -> None:
    read_trace(path, ranks, batch, topk, experts, source)


def trace_routing(path: str, ranks: int, batch: int, topk: int,
                  experts: int) -> tuple[np.ndarray, np.ndarray]:
    """read_trace's, read once per file as it stands (a sweep asks for it per row)."""
    st = os.stat(path)
    return _trace_routing(os.path.realpath(path), ranks, batch, topk, experts, st.st_ino,
                          st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@functools.lru_cache(maxsize=16)
def _trace_routing(path, ranks, batch, topk, experts, *stamps):
    out = read_trace(path, ranks, batch, topk, experts)
    for a in out:
        a.setflags(write=False)   # cached: shared by every caller
    return out
