"""bsp (CANN EP): the twin of kernels/protocols/bsp.py's own code, CalCumSum between SyncAlls."""

from __future__ import annotations

from ..state import Core, Run, share
from ..sync import syncall


def bsp_cumsum(run: Run, cores: list[Core]) -> None:
    """bsp's SyncAll, CalCumSum (each AIV an equal share of the ranks x experts-per-die
    counts' prefix sum), SyncAll."""
    syncall(cores, max(a.t for a in cores), run.c["syncall"])
    entries = run.ranks * run.e_local
    for j, a in enumerate(cores):
        a.spend("cumsum", run.c["prefix"] * len(share(j, len(cores), entries)))
        a.mark("cumsum")
    syncall(cores, max(a.t for a in cores), run.c["syncall"])
