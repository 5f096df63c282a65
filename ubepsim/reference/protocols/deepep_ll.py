"""deepep_ll: the twin of kernels/protocols/deepep_ll.py's own code, the fixed slots' receive."""

from __future__ import annotations

from ..polls import poll, seen
from ..receive import received
from ..state import Die, Run, share


def pair_receive(run: Run, dies: list[Die], d: int) -> None:
    """Fixed slots (DeepEP's receive): each AIV of die d takes its equal contiguous share of
    the (local expert, source) pairs, pair q = expert * ranks + source; per pair it polls the
    source's count message (verified and re-armed as run.count_sync says), then copies the
    pair's copies out of their slots, each once it is there where the count came behind them
    on their queue (ORDERED). Then it ends its step, pair_receive."""
    c, policy = run.c, run.count_sync
    die = dies[d]
    R, EL = run.ranks, run.e_local
    pairs: list[list[tuple[int, int]]] = [[] for _ in range(EL * R)]
    for s, i in received(dies, d):
        pairs[dies[s].copies[i][2] % EL * R + s].append((s, i))
    for j, a in enumerate(die.cores):
        for q in share(j, run.cores, EL * R):
            st = dies[q % R].count_signal[d * run.per_dest + q // R % run.per_dest]
            poll(a, seen(run, die, st, q, run.q_count, policy), c["poll"], "sync")
            a.spend("sync", c["status_poll"])
            if policy.verify_per_block:
                a.spend("sync", c["count_verify"])
            if policy.rearm_sentinel:
                a.spend("sync", c["count_reset"])
            for s, i in pairs[q]:
                data = dies[s].copy_store[i]
                if run.mech.ordered:
                    a.spend("sync", max(0, data.visible - a.t), waiting=True)
                if a.t < data.visible:
                    die.violations += 1
                a.spend("reorder", c["local_copy"])
                die.take((s, i), data, d)
        a.mark("pair_receive")
