"""UBEP's CalCumSum group where users meet it: `cumsum_cores = "tuned"`, the size `ubepsim tune`
picks for a configuration's own workload.

`ubepsim tune` (ubepsim.fit.tune) and the tuned default share what is here: the sizes tried
(1 to max_groups(cores)), the batch that simulates workloads at each size (group_latencies) and
the pick (pick: the least mean latency over the seeds, the smaller size on a tie). A tuned
configuration's group is tune's pick for that configuration alone: its own parameters and seed,
sizes 1 to max_groups of its cores, the latency of its op.

A tuned group is computed once per workload and profile and kept in an in-process cache keyed
by every parameter but cumsum_cores, exactly (each value as config_id hashes it, a trace by its
content, a list of batches by its text), and the profile. A batch of configurations tunes the
workloads the cache lacks together, in one batch of the parallel kernel per size range, in the
order of their first rows; a workload's group depends on it alone, never on the batch, the
threads or the chunking of a sweep. (In a sweep the tuned rows are distinct configurations, so
each workload is tuned once; the cache spares calls in one process that meet a workload again,
a notebook's `simulate` or validate's claims, their work. Its size is bounded, oldest out
first.)
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
from collections.abc import Sequence

import numpy as np

from .kernel_io import run_batch
from .params import GATED, NAMES, TUNED_CODE, Config, as_words, recorded_value
from .profile import Profile

# Figure 14's largest group size (ubepsim.paper.numbers.FIG14_GROUPS, which a test holds equal):
# the sizes tried are 1 to this, or one below the die's cores if fewer.
MOST_GROUPS = 16
CACHE_SIZE = 1 << 15     # workloads kept (a key is about 250 bytes)
KEY_NAMES = tuple(n for n in NAMES if n != "cumsum_cores")

_cache: collections.OrderedDict[bytes, int] = collections.OrderedDict()


def max_groups(cores):
    """The largest group size tried on dies of `cores` (a scalar or a column): Figure 14's 16,
    or fewer on dies with fewer cores, since at least one core must send tokens."""
    top = np.minimum(MOST_GROUPS, np.asarray(cores) - 1)
    return int(top) if top.ndim == 0 else top


def group_latencies(cols: dict[str, np.ndarray], sizes: Sequence[int], profile: Profile,
                    threads: int | None = None, memory_checked: bool = False) -> np.ndarray:
    """The latency of each configuration of `cols` (columns of configurations that read
    cumsum_cores; its own cumsum_cores aside) at each group size of `sizes`: a (configurations,
    sizes) array, simulated as one batch of the parallel kernel."""
    n, m = len(cols["ranks"]), len(sizes)
    points = {name: np.repeat(np.asarray(v), m) for name, v in cols.items()}
    points["cumsum_cores"] = np.tile(np.asarray(sizes, dtype=np.int64), n)
    return run_batch(points, profile, threads, memory_checked)["latency_us"].reshape(n, m)


def pick(per_seed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each workload's best size from its latencies (workloads, sizes, seeds): the index of
    the least mean over the seeds (the first: the smaller size on a tie), and the means."""
    latency = per_seed.mean(axis=2)
    return latency.argmin(axis=1), latency


def tuned_groups(cols: dict[str, np.ndarray], profile: Profile, threads: int | None = None,
                 memory_checked: bool = False) -> np.ndarray:
    """The tuned group of each configuration of `cols` (canonical columns of configurations
    that read cumsum_cores): from the cache, or tuned here, each workload once."""
    keys = cache_keys(cols, profile)
    out = np.zeros(len(keys), dtype=np.int64)
    todo: dict[bytes, list[int]] = {}    # the workloads to tune, in the order of their first rows
    for i, key in enumerate(keys):
        group = _cache.get(key)
        if group is None:
            todo.setdefault(key, []).append(i)
        else:
            _cache.move_to_end(key)
            out[i] = group
    if not todo:
        return out
    keys, rows = list(todo), list(todo.values())
    first = np.array([r[0] for r in rows])
    tops = max_groups(np.asarray(cols["cores"])[first])
    for top in np.unique(tops):
        at = np.flatnonzero(tops == top)
        sub = {name: np.asarray(v)[first[at]] for name, v in cols.items()}
        latency = group_latencies(sub, range(1, int(top) + 1), profile, threads, memory_checked)
        best, _ = pick(latency[:, :, None])   # one seed: the workload's own
        for j, b in zip(at, best):
            group = int(b) + 1
            out[rows[j]] = group
            _cache[keys[j]] = group
            if len(_cache) > CACHE_SIZE:
                _cache.popitem(last=False)
    return out


def cache_keys(cols: dict[str, np.ndarray], profile: Profile) -> list[bytes]:
    """Each configuration's cache key: the profile, then every parameter but cumsum_cores as
    config_id hashes it (params.as_words), then the text of its batches (exact where a hash of
    it is not)."""
    prefix = hashlib.sha256(profile.to_toml().encode()).digest()
    words = np.stack([as_words(n, cols[n]) for n in KEY_NAMES], axis=1)
    texts = np.asarray(cols["batches"]).astype(str)
    return [prefix + w.tobytes() + t.encode() for w, t in zip(words, texts)]


def resolve(cols: dict[str, np.ndarray], profile: Profile, threads: int | None = None,
            memory_checked: bool = False) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Columns of configurations with each tuned group (TUNED_CODE where cumsum_cores is read)
    replaced by its size (tuned_groups), and which rows were tuned. A TUNED_CODE where it is not
    read is recorded as such a configuration records it (1)."""
    sizes = np.asarray(cols["cumsum_cores"], dtype=np.int64)
    waiting = sizes == TUNED_CODE
    if not waiting.any():
        return cols, waiting
    tuned = waiting & GATED["cumsum_cores"].reads(cols)
    sizes = np.where(waiting, recorded_value("cumsum_cores"), sizes)
    at = np.flatnonzero(tuned)
    if len(at):
        sizes[at] = tuned_groups({n: np.asarray(v)[at] for n, v in cols.items()}, profile,
                                 threads, memory_checked)
    return {**cols, "cumsum_cores": sizes}, tuned


def resolve_config(config: Config, profile: Profile) -> Config:
    """A configuration with its group as it runs: a tuned one's size (resolve), its sizes
    simulated on as many threads as copies of it fit in the memory available (the caller
    checked that one does), the process's thread count left as it was."""
    import numba

    from . import memory

    if not config.tuned:
        return config
    cols = config.columns()
    before = numba.get_num_threads()
    fit = memory.available_memory() // max(1, int(memory.working_memory(cols, profile)[0]))
    try:
        cols, _ = resolve(cols, profile, max(1, min(before, fit)))
    finally:
        numba.set_num_threads(before)
    return dataclasses.replace(config, cumsum_cores=int(cols["cumsum_cores"][0]))


def clear_cache() -> None:
    """Forget every tuned group (tests; a long-lived process that changes its profiles)."""
    _cache.clear()
