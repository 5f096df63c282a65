"""Synchronization: the Data-as-Flag variants (paper Section 3.4) and SyncAll.

A Data-as-Flag variant changes the stores that signal their own arrival (count messages, and
token copies where the protocol signals them: kernels.protocols.SIGNALLED_COPIES) and the
receiver's work on them. What each variant adds is written once,
in POLICY; the kernel reads a configuration's row once (`effects`) and its stages consult those
values, never the variant's code; the lowering (ubepsim.model.costs) reads the same table for the
in-block flag's smaller payload and for the sentinel's collisions.
"""

from collections import namedtuple

import numpy as np

from .jit import njit
from .layout import B_SYNC, DC, K_CHECKSUM, K_FLAG, SP, SW, TFF

# What a variant adds, per column. On the sender:
# FLAG: a flag store after each signalling store, behind a FENCE (it waits until every earlier
#   store of its AIV completed), polled by the receiver;
# CHECKSUM: a checksum store after an AIV's last copy to each destination (and after each count
#   message), polled by the receiver; MARKER: per copy, the sender's checksum work on its blocks;
# IN_BLOCK: the flag rides inside each block, which carries flag_bytes less payload.
# On the receiver, per signalling store polled:
# VERIFY: the check of its blocks' flag, checksum or sentinel once seen (sw's separate flag is
#   its own check); REARM: the sentinel written back into its blocks after use;
# COLLIDES: a payload equal to the sentinel looks like no data: the poll sees the store only
#   after a timeout (the chance is a profile parameter).
FLAG, CHECKSUM, FENCE, MARKER, IN_BLOCK, VERIFY, REARM, COLLIDES = range(8)
POLICY = np.zeros((4, 8), np.int64)
POLICY[SW, FLAG] = POLICY[SW, FENCE] = 1                       # stop-and-wait
POLICY[TFF, IN_BLOCK] = POLICY[TFF, VERIFY] = 1                # token-flag fusion
POLICY[DC, CHECKSUM] = POLICY[DC, MARKER] = POLICY[DC, VERIFY] = 1   # data-for-checksum
POLICY[SP, VERIFY] = POLICY[SP, REARM] = POLICY[SP, COLLIDES] = 1    # sentinel polling
NO_SIGNAL = -1   # no signal store: the signal rides in the data's own blocks

# A configuration's decoded row (`effects`), split by the store the effect applies to.
# copy_signal, count_signal: the kind of the signal store a copy (FLAG: each copy; CHECKSUM:
# the AIV's last copy to a destination) or a count message is followed by, or NO_SIGNAL;
# fence: whether a flag waits for its AIV's earlier stores; copy_marker: the sender's work per
# copy, in copy_verify cycles; copy_verify, count_verify, copy_rearm, count_rearm: 0 or 1, the
# receiver's check and re-arm per store.
Effects = namedtuple("Effects", ("copy_signal", "count_signal", "fence", "copy_marker",
                                 "copy_verify", "count_verify", "copy_rearm", "count_rearm"))


def on_copies(sync, signalled, effect):
    """Whether token copies take `effect` of variant `sync`: 0 or 1, numpy columns or scalars.
    Only where the protocol's copies are `signalled` (protocols.SIGNALLED_COPIES): otherwise a
    barrier orders them before the counts, and they carry no flag, checksum or marker, no
    in-block flag, nothing to verify or re-arm."""
    return POLICY[sync, effect] * signalled


_on_copies = njit(inline="always")(on_copies)   # the same rule, for the kernel


def signal_stores(sync, signalled):
    """(per copy, per count message): the stores of its own each carries for its signal, 0 or 1
    (numpy columns or scalars): a flag or checksum; none if the signal rides in its blocks."""
    return (on_copies(sync, signalled, FLAG) | on_copies(sync, signalled, CHECKSUM),
            POLICY[sync, FLAG] | POLICY[sync, CHECKSUM])


@njit
def effects(sync, signalled):
    """A configuration's POLICY row, as the stages read it (see Effects)."""
    row = POLICY[sync]
    signal = K_FLAG if row[FLAG] else (K_CHECKSUM if row[CHECKSUM] else NO_SIGNAL)
    copy_signal = _on_copies(sync, signalled, FLAG) | _on_copies(sync, signalled, CHECKSUM)
    return Effects(signal if copy_signal else NO_SIGNAL, signal, row[FENCE],
                   _on_copies(sync, signalled, MARKER), _on_copies(sync, signalled, VERIFY),
                   row[VERIFY], _on_copies(sync, signalled, REARM), row[REARM])


@njit(inline="always")
def syncall(die, ready, cost, t_core, bucket, wait, marks, nmarks):
    """SyncAll: every AIV of `die` waits until the last of them arrives (and `ready`, what the
    barrier waits for besides their clocks), plus the barrier's cost; the wait counts as sync
    (t_core ... nmarks: layout.Cores' arrays). Returns the barrier's time."""
    A = t_core.shape[1]
    barrier = ready
    for a in range(A):
        barrier = max(barrier, t_core[die, a])
    barrier += cost
    for a in range(A):
        w = barrier - t_core[die, a]
        bucket[die, a, B_SYNC] += w
        wait[die, a] += w
        t_core[die, a] = barrier
        marks[die, a, nmarks[die, a]] = barrier
        nmarks[die, a] += 1
    return barrier
