"""A receiver's steps, shared by the stages and the protocols' own receives: polls in closed
form (`poll`: the twin polls in a loop, one load per period), a sentinel's collision (`seen`),
a copy's first take (`take`), the end of a step of polls and work (`close_step`), and when
each die's last core is done (`die_ends`)."""

import numpy as np

from . import rng
from .jit import njit, u
from .layout import ARR, B_SYNC, K_COPY, LOCAL, TAKEN


@njit(inline="always")
def poll(t, visible, period, inv_period):
    """Back-to-back polls from t: the time the first poll issued at or after `visible`
    returns. inv_period = 1 / period replaces a division per poll; the quotient is corrected
    to the exact ceiling."""
    if visible <= t:
        return t + period
    gap = visible - t
    n = np.int64(gap * inv_period)
    if n * period < gap:
        n += 1
    elif (n - 1) * period >= gap:
        n -= 1
    return t + (n + 1) * period


@njit(inline="always")
def take(sto, sid, b_lo, b_hi):
    """A receiver takes copy `sid` out of its die's bucket (ids b_lo .. b_hi): 1 if this is
    the copy's first take (a copy store that arrived, or a local one, and in the bucket: a
    delivery), 0 for a second take or anything else; a taken copy is marked TAKEN. Without a
    branch: inlined into a loop over copies, a function that branches pays its array argument
    a reference count up and down on every call (Numba prunes the pair only within a block)."""
    w = sto[u(sid), ARR]
    first = np.int64(((w == LOCAL - K_COPY) | ((w >= 0) & (w & 3 == K_COPY))) &
                     (b_lo <= sid) & (sid < b_hi))
    sto[u(sid), ARR] = w + first * (TAKEN - w)
    return first


@njit(inline="always")
def seen(visible, skey, index, chance, timeout):
    """When a poll can see a signal visible at `visible`: then, or after the sentinel's timeout
    if its payload collided with the sentinel (draw `index` of the die's sentinel stream, with
    probability `chance`; zero unless the variant collides). Returns (time, collisions)."""
    if chance > 0.0 and rng.unit(skey, index) < chance:
        return visible + timeout, 1
    return visible, 0


@njit(inline="always")
def close_step(d, a, t, polled, checked, work_bucket, work, t_core, bucket, wait, marks, nmarks):
    """AIV a of die d ends a step of polls at t: the polls' cycles (polled, spent waiting) and
    the checks after them (checked) count as sync, `work` as work_bucket's; its clock moves to
    t, which marks the step's end."""
    bucket[d, a, B_SYNC] += polled + checked
    bucket[d, a, work_bucket] += work
    wait[d, a] += polled
    t_core[d, a] = t
    marks[d, a, nmarks[d, a]] = t
    nmarks[d, a] += 1


@njit(inline="always")
def die_ends(t_core):
    """When each die's last AIV is done."""
    R, A = t_core.shape
    ends = np.zeros(R, np.int64)
    for d in range(R):
        for a in range(A):
            ends[d] = max(ends[d], t_core[d, a])
    return ends
