"""UBEP's CalCumSum group sizes as `ubepsim tune` tries them: the sizes (1 to max_groups(cores)),
the batch that simulates workloads at each size (group_latencies) and the pick (pick: the least
mean latency over the seeds, the smaller size on a tie), written once for every caller.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .profile import Profile

# Figure 14's largest group size (ubepsim.paper.numbers.FIG14_GROUPS, which a test holds equal):
# the sizes tried are 1 to this, or one below the die's cores if fewer.
MOST_GROUPS = 16


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
    from .api import simulate_columns

    n, m = len(cols["ranks"]), len(sizes)
    points = {name: np.repeat(np.asarray(v), m) for name, v in cols.items()}
    points["cumsum_cores"] = np.tile(np.asarray(sizes, dtype=np.int64), n)
    return simulate_columns(points, profile, threads, memory_checked)["latency_us"].reshape(n, m)


def pick(per_seed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each workload's best size from its latencies (workloads, sizes, seeds): the index of
    the least mean over the seeds (the first: the smaller size on a tie), and the means."""
    latency = per_seed.mean(axis=2)
    return latency.argmin(axis=1), latency
