"""A receiver's polls, shared by the stages and the protocols' own receives, as in
kernels/polls.py: a poll in a loop, one load per period (`poll`; the kernel's is in closed form),
and a sentinel's collision (`seen`). A copy's first take is state.Die.take.

A poll reads the poller's own memory: each costs a poll period (the local latency) and sees a
value only if it was visible when the poll was issued.
"""

from __future__ import annotations

from .rng import unit
from .state import Core, Die, Run, Store
from .sync import DataAsFlag


def poll(core: Core, visible: int, period: int, bucket: str) -> None:
    """Poll own memory until `visible` is seen: one load per `period`, issued back to back."""
    start = core.t
    while True:
        issued = core.t
        core.t += period
        if visible <= issued:
            break
    core.buckets[bucket] += core.t - start
    core.wait += core.t - start


def seen(run: Run, die: Die, st: Store, index: int, chance: float, policy: DataAsFlag) -> int:
    """When die's polls can see `st`: when it became visible or, if its payload collided with
    the sentinel (draw `index` of the die's stream, with this chance), a timeout later."""
    if policy.timeout_on_collision and unit(die.sentinel_key, index) < chance:
        die.collisions += 1
        return st.visible + run.c["timeout"]
    return st.visible
