"""The memory a simulation needs and the memory this process may take.

    working_memory(cols)     bytes the kernel works in for each configuration
    available_memory()       bytes this process can take now (the machine's, within its cgroups)
    check_memory(...)        an InputError, before any work, if those at once would not fit
    keep_freed_memory()      glibc keeps the scratch arrays' memory for the next configuration
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..kernels import combine, dispatch
from .costs import tier_links
from .params import Op, copies_per_die
from .profile import Profile
from .workload import batch_max


def working_memory(cols: dict[str, np.ndarray], profile: Profile) -> np.ndarray:
    """Bytes the kernel works in while it simulates each configuration of resolved columns
    (params.columns) on `profile` (its cores' rings of stores in flight): kernels.dispatch.
    working_bytes unless the op is combine alone (then its routing), plus kernels.combine.
    working_bytes unless it is dispatch alone (a layer holds both)."""
    protocol = np.asarray(cols["protocol"], dtype=np.int64)
    sync = np.asarray(cols["sync"], dtype=np.int64)
    op = np.asarray(cols["op"], dtype=np.int64)
    copies = copies_per_die(cols["batch"], cols["topk"])
    routing = 4 * np.asarray(cols["ranks"], dtype=np.int64) * copies
    shape = (cols["ranks"], cols["batch"], cols["topk"], copies,
             copies_per_die(batch_max(cols), cols["topk"]), cols["experts"], cols["cores"],
             protocol, sync, profile.blocks_in_flight, int(any(tier_links(profile))))
    first = dispatch.working_bytes(*shape)
    second = combine.working_bytes(*shape)
    return np.where(op == Op.combine, routing, first) + np.where(op == Op.dispatch, 0, second)


# A container's or batch job's memory: per cgroup version (v2, then v1's memory hierarchy),
# where Linux mounts it, the controller /proc/self/cgroup names it by, and each cgroup's limit
# and usage files and the reclaimable page cache in its memory.stat.
CGROUPS = (("/sys/fs/cgroup", "", "memory.max", "memory.current", "inactive_file"),
           ("/sys/fs/cgroup/memory", "memory", "memory.limit_in_bytes", "memory.usage_in_bytes",
            "total_inactive_file"))
PROC_CGROUP = Path("/proc/self/cgroup")


def available_memory() -> int:
    """Bytes this process can take now without swapping: the machine's available memory
    (psutil's, what free(1) calls available), and no more than the memory limits of its
    container or batch job leave: those of its cgroup and of each cgroup above it, less their
    usage, not counting the page cache the kernel reclaims first (inactive files)."""
    import psutil

    available = psutil.virtual_memory().available
    try:
        lines = PROC_CGROUP.read_text().splitlines()
    except OSError:
        return available                # not Linux
    where = {}                          # controller -> this process's cgroup
    for line in lines:                  # ID:CONTROLLERS:PATH, v2's controllers empty
        _, controllers, path = line.split(":", 2)
        where.update((c, path) for c in controllers.split(","))
    for mount, controller, limit, usage, inactive in CGROUPS:
        if controller not in where:
            continue
        group = Path(mount + where[controller])
        for cgroup in (group, *group.parents[:len(group.relative_to(mount).parts)]):
            try:
                left = int((cgroup / limit).read_text()) - int((cgroup / usage).read_text())
                stat = (cgroup / "memory.stat").read_text().split()
            except (OSError, ValueError):   # not mounted there, or no limit ("max")
                continue
            cache = dict(zip(stat[::2], stat[1::2])).get(inactive, "0")
            available = min(available, max(0, left + int(cache)))
    return available


def check_memory(top: np.ndarray, largest: Mapping[str, Any], available: int,
                 where: str = "this process", threads: str = "threads",
                 source: str | None = None) -> None:
    """An InputError, before any work, if the configurations simulated at once could need
    more than `available` bytes. `top`: the working memory of as many configurations as run
    at once, the largest first; `largest`: the parameters of that one; `threads`: the key
    that sets how many run at once."""
    top = np.asarray(top, dtype=np.int64)
    if top.sum() <= available:
        return
    shown = ", ".join(f"{n} = {largest[n]}" for n in ("ranks", "batch", "topk", "protocol",
                                                      "sync"))
    if top[0] > available:
        # ranks: the count messages grow with its square, the token copies with it
        raise InputError("ranks", f"{shown} needs about {_gib(top[0])} of memory to simulate, "
                         f"more than the {_gib(available)} available to {where}; lower ranks "
                         f"or batch x topk" + ("; drop such points with a [sweep] filter"
                                                if source else ""), source)
    fit = int(np.searchsorted(np.cumsum(top), available, side="right"))
    raise InputError(threads, f"{len(top)} configurations simulated at once could need "
                     f"{_gib(top.sum())} of memory ({shown}: {_gib(top[0])} alone), more than "
                     f"the {_gib(available)} available to {where}; at most {fit} fit at once")


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"


def keep_freed_memory() -> None:
    """Ask glibc to keep freed memory instead of returning it to the kernel.

    Each configuration allocates tens of MB of scratch arrays; with glibc's defaults they are
    mmap'd and unmapped every time and the page faults cost ~15% of a simulation.
    """
    global _MALLOC_TUNED
    if _MALLOC_TUNED:
        return
    _MALLOC_TUNED = True
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-1, 1 << 30)   # M_TRIM_THRESHOLD
        libc.mallopt(-3, 1 << 30)   # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass                        # not glibc: slower, same results


_MALLOC_TUNED = False
