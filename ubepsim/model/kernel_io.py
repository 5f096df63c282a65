"""The batch kernel's inputs and outputs, on the host side.

    prepare(cols, profile)      parameter columns packed into the kernel's input arrays
    check_machine(...)          configurations with more ranks than the profile's machine
    check_time_bound(...)       configurations whose times the kernel's event keys cannot hold
    kernel_order(params)        the order in which the batch kernel takes the rows
    result_columns(out, ...)    the kernel's output rows, checked, as result columns
    run_batch(cols, profile)    configurations whose groups are stated, through all of the above

`cols` are configurations' columns as the model computes on them (params.columns: canonical,
enums as their codes); the result columns are the fields of result_fields.
"""

from __future__ import annotations

import numpy as np

from typing import Any

from . import memory
from .costs import lower, time_bound
from ..errors import InputError
from ..kernels import layer
from ..kernels import layout as k
from ..kernels.sync import IN_BLOCK, POLICY, REARM
from .params import (ENUMS, GATED, NAMES, TUNED_CODE, BatchSpread, Op, Routing, Sync,
                     copies_per_die, workload_keys)
from .profile import BUILTIN, Profile, load_profile
from .result_fields import RESULT_NAMES, RESULTS
from .traces import trace_routing
from .workload import batches_key, cdf_key, die_batches, expert_cdf, has_weights, trace_key

# The results computed on the host (units layout.BYTES and GBPS), in the order they are
# computed, each from the kernel's results (in their units), the parameters and the costs.


def _bytes_per_rank(res, cols, costs):
    """batch x topk x a copy's bytes: dispatched, returned, or both in a layer."""
    op = np.asarray(cols["op"], dtype=np.int64)
    copy_bytes = np.where(op == Op.combine, 0, costs[:, k.C_TOKEN_BYTES]) + \
        np.where(op == Op.dispatch, 0, costs[:, k.C_RETURN_BYTES])
    return copies_per_die(cols["batch"], cols["topk"]) * copy_bytes


def _max_mean(slot):
    """A die's most token copies (the kernel's output `slot`) against the mean over dies."""
    return lambda res, cols, costs: res[slot] * np.asarray(cols["ranks"]) / res["copies_total"]


HOST_RESULTS = {
    "bytes_per_rank": _bytes_per_rank,
    "bw_gbps": lambda res, cols, costs: res["bytes_per_rank"] / (res["latency_us"] * 1000.0),
    "recv_max_mean": _max_mean("recv_max"),
    "send_max_mean": _max_mean("send_max"),
}


def prepare(cols: dict[str, np.ndarray], profile: Profile):
    """Kernel inputs for configurations' columns: (params, costs, chances, cdf, trace,
    batches)."""
    n = len(cols["ranks"])
    if np.any((np.asarray(cols["cumsum_cores"]) == TUNED_CODE) & GATED["cumsum_cores"].reads(cols)):
        raise ValueError("a tuned CalCumSum group reached the kernel unresolved; "
                         "ubepsim.model.groups.resolve gives its size")
    params = np.zeros((n, k.N_PARAMS), dtype=np.int64)
    for col, name in ((k.P_RANKS, "ranks"), (k.P_BATCH, "batch"), (k.P_TOPK, "topk"),
                      (k.P_EXPERTS, "experts"), (k.P_CORES, "cores"), (k.P_CUMSUM, "cumsum_cores"),
                      (k.P_PROTOCOL, "protocol"), (k.P_SYNC, "sync"), (k.P_SCHEDULE, "schedule"),
                      (k.P_ROUTING, "routing"), (k.P_SEED, "seed"), (k.P_OP, "op")):
        params[:, col] = np.asarray(cols[name], dtype=np.int64)
    wkeys = workload_keys(cols)
    params[:, k.P_WKEY] = wkeys
    check_machine(cols, profile)
    costs, chances = lower(cols, profile)
    check_time_bound(cols, costs, profile)
    # Popularity weights and traces are shared by every row of the same workload.
    cdf_parts, trace_parts = [np.zeros(0)], [np.zeros(0, dtype=np.int64)]
    cdf_at: dict[tuple, tuple[int, int]] = {}
    trace_at: dict[tuple, int] = {}
    cdf_end, trace_end = 0, 0
    routing = np.asarray(cols["routing"])
    # plain uniform routing reads no weights (its rows keep an empty cdf)
    for i in np.flatnonzero((routing == Routing.trace) | has_weights(
            routing, cols["zero_experts"], cols["zero_ranks"])):
        if routing[i] == Routing.trace:
            tkey = trace_key(cols, i)
            if tkey not in trace_at:
                trace_at[tkey] = trace_end
                arr = trace_routing(*tkey)[0].ravel()
                trace_parts.append(arr)
                trace_end += len(arr)
            params[i, k.P_TRACE] = trace_at[tkey]
            continue
        ckey = cdf_key(routing[i], cols["experts"][i], cols["ranks"][i], cols["seed"][i],
                       wkeys[i], lambda name: cols[name][i])
        if ckey not in cdf_at:
            cdf = expert_cdf(*ckey)
            cdf_at[ckey] = (cdf_end, len(cdf))
            cdf_parts.append(cdf)
            cdf_end += len(cdf)
        params[i, k.P_CDF_START], params[i, k.P_CDF_LEN] = cdf_at[ckey]
    # Tokens per die where they are not all `batch`, shared by every row of one spread.
    params[:, k.P_BATCHES] = k.EQUAL_BATCHES
    batch_parts = [np.zeros(0, dtype=np.int64)]
    batches_at: dict[tuple, int] = {}
    batches_end = 0
    # (a trace's are its own, where they differ)
    traced = routing == Routing.trace
    for i in np.flatnonzero((np.asarray(cols["batch_spread"]) != BatchSpread.equal) | traced):
        bkey = trace_key(cols, i) if traced[i] else batches_key(lambda name: cols[name][i],
                                                                  wkeys[i])
        if bkey not in batches_at:
            tokens = trace_routing(*bkey)[1] if traced[i] else die_batches(*bkey)
            if (tokens == cols["batch"][i]).all():
                continue
            batches_at[bkey] = batches_end
            batch_parts.append(tokens)
            batches_end += len(tokens)
        params[i, k.P_BATCHES] = batches_at[bkey]
    return (params, costs, chances, np.concatenate(cdf_parts),
            np.concatenate(trace_parts).astype(np.int64), np.concatenate(batch_parts))


def check_machine(cols: dict[str, np.ndarray], profile: Profile,
                  source: str | None = None) -> None:
    """An InputError for the first configuration with more ranks than the profile's machine
    has dies."""
    over = np.asarray(cols["ranks"]) > profile.dies
    if over.any():
        ranks = int(np.asarray(cols["ranks"])[np.flatnonzero(over)[0]])
        bigger = [n for n in BUILTIN if load_profile(n).dies >= ranks]
        raise InputError("ranks", f"{ranks} is more than the {profile.dies} dies of profile "
                         f"{profile.name}" + (f"; a profile of more dies: {', '.join(bigger)}"
                                              if bigger else ""), source)
    # Data-as-Flag's in-block variants need a block the fabric writes whole (paper Table 5)
    if not profile.writes_blocks_whole:
        sync = np.asarray(cols["sync"], dtype=np.int64)
        whole = GATED["sync"].reads(cols) & ((POLICY[sync, IN_BLOCK] == 1) |
                                             (POLICY[sync, REARM] == 1))
        if whole.any():
            name = Sync(int(sync[np.flatnonzero(whole)[0]])).name
            raise InputError("sync", f"{name} needs stores the fabric writes whole, blocks of "
                             f"{profile.block_bytes} bytes, and profile {profile.name} writes "
                             f"{profile.atomic_bytes} bytes whole (atomic_bytes): use dc or sw "
                             f"(paper Table 5: without atomic writes Data-as-Flag falls back to "
                             f"data-for-checksum or fences)", source)


def check_time_bound(cols: dict[str, np.ndarray], costs: np.ndarray, profile: Profile,
                     source: str | None = None) -> None:
    """An InputError for the first configuration (`costs` lowered from its columns) whose times
    could reach the kernel's MAX_TIME: the egress queue packs a time with an AIV in one 64-bit
    key. Only a profile far slower than any fabric's meets it."""
    over = time_bound(cols, costs) >= k.MAX_TIME
    if over.any():
        i = int(np.flatnonzero(over)[0])
        point = ", ".join(f"{n} = {int(cols[n][i])}" for n in ("ranks", "batch", "topk",
                                                                 "experts", "hidden", "cores"))
        days = k.MAX_TIME / (profile.clock_ghz * 1e9 * 86400)
        raise InputError("profile", f"at {point}, simulated times could reach 2^"
                         f"{k.MAX_TIME.bit_length() - 1} cycles ({days:.1f} days at clock_ghz "
                         f"{profile.clock_ghz:g}), more than the model's 64-bit event keys "
                         f"hold; its bandwidths, latencies and cycle costs are too slow for a "
                         f"configuration this large", source)


def kernel_order(params: np.ndarray) -> np.ndarray:
    """The order in which the batch kernel takes rows: a configuration's sync variants side
    by side, where they share one schedule (kernels.dispatch.simulate_batch), and those runs
    in a fixed shuffled order. The kernel gives each thread one contiguous block of runs, and
    in the order given the large configurations may come together (a sweep's grid order, fig14:
    1.2x on 2 threads); shuffled, the blocks cost about the same. Each row depends only on its
    own inputs, so the order changes no result."""
    _, run = np.unique(np.delete(params, k.P_SYNC, axis=1), axis=0, return_inverse=True)
    run = run.ravel()
    shuffled = np.random.default_rng(len(params)).permutation(run.max() + 1 if run.size else 0)
    return np.argsort(shuffled[run], kind="stable")


class KernelFailure(RuntimeError):
    """A row the kernel did not finish, or one that breaks an invariant: a bug of the model, or
    an error Numba did not report (out of memory?). `row` is its index in the batch."""

    def __init__(self, row: int, message: str):
        super().__init__(message)
        self.row = row

    def __reduce__(self):   # as a Dask worker sends it back: pickled with its row
        return KernelFailure, (self.row, str(self))


def result_columns(out: np.ndarray, cols: dict[str, np.ndarray], costs: np.ndarray,
                   profile: Profile) -> dict[str, np.ndarray]:
    """Result columns from kernel rows, after checking the invariants every row must hold."""
    # the copies a row must account for, from its parameters rather than from the row: Numba
    # does not report an exception raised on a worker thread of the parallel loop, and the row
    # it left unfinished would otherwise pass (all zero)
    copies = (np.asarray(cols["ranks"], dtype=np.int64) * np.asarray(cols["batch"], dtype=np.int64)
              * np.asarray(cols["topk"], dtype=np.int64))
    moved = np.where(np.asarray(cols["op"]) == Op.layer, 2, 1) * copies     # a layer sends each copy twice
    bad = (out[:, k.O_COPIES_TOTAL] != copies) | (out[:, k.O_SENT] != moved) | \
        (out[:, k.O_DELIVERED] != moved) | (out[:, k.O_VIOLATIONS] != 0) | \
        (out[:, k.O_LATENCY] < out[:, k.O_BOUND])
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        if out[i, k.O_COPIES_TOTAL] != copies[i]:   # written once the configuration is done
            raise KernelFailure(i, f"the kernel did not finish row {i}: an error on a worker "
                                f"thread, which Numba does not report (out of memory?); "
                                f"`ubepsim run` with its parameters shows it")
        raise KernelFailure(i, f"model invariant violated ({out[i, k.O_SENT]:.0f} of "
                            f"{moved[i]} copies sent, {out[i, k.O_DELIVERED]:.0f} delivered "
                            f"once, {out[i, k.O_VIOLATIONS]:.0f} read before visible, latency "
                            f"{out[i, k.O_LATENCY]:.0f} cycles against a bound of "
                            f"{out[i, k.O_BOUND]:.0f}) at row {i}")
    clock = profile.values["clock_ghz"] * 1000.0   # cycles per microsecond
    res = {f.name: out[:, f.slot] / clock if f.unit == k.US else out[:, f.slot].astype(np.int64)
           for f in RESULTS if f.slot is not None}
    res["recv_max"], res["send_max"] = out[:, k.O_RECV_MAX], out[:, k.O_SEND_MAX]
    for name, compute in HOST_RESULTS.items():
        res[name] = compute(res, cols, costs)
    return {name: res[name] for name in RESULT_NAMES}


def run_batch(cols: dict[str, np.ndarray], profile: Profile, threads: int | None = None,
              memory_checked: bool = False) -> dict[str, np.ndarray]:
    """Result columns for configurations' columns whose CalCumSum groups are stated (a tuned
    one resolved first: ubepsim.model.groups), through the parallel batch kernel on `threads`
    threads (None: as set). Refuses (InputError) configurations that could not fit in memory
    together, unless the caller has checked that already (a sweep, once for its whole grid)."""
    admit(cols, profile, threads, memory_checked)
    memory.keep_freed_memory()
    params, costs, chances, *shared = prepare(cols, profile)
    order = kernel_order(params)
    done = np.zeros((len(params), k.N_OUT))
    layer.simulate_batch(params[order], costs[order], chances[order], *shared, done)
    out = np.empty_like(done)
    out[order] = done
    return result_columns(out, cols, costs, profile)


def admit(cols: dict[str, np.ndarray], profile: Profile, threads: int | None = None,
          memory_checked: bool = False) -> None:
    """Sets the kernel's threads (None: as they are) and, unless `memory_checked`, refuses
    (InputError) configurations of which one per thread could not fit in memory together."""
    import numba

    if threads is not None:
        numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    if not memory_checked and len(cols["ranks"]):
        need = memory.working_memory(cols, profile)
        top = np.argsort(need)[::-1][:numba.get_num_threads()]   # at most one per thread
        memory.check_memory(need[top], _named(cols, int(top[0])), memory.available_memory())


def _named(cols: dict[str, np.ndarray], i: int) -> dict[str, Any]:
    """Row i of configurations' columns, an enum by its name (as a message names it)."""
    return {n: ENUMS[n](int(cols[n][i])).name if n in ENUMS else np.asarray(cols[n])[i]
            for n in NAMES}
