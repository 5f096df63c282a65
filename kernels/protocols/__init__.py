"""Protocols as modules: each protocol is a module of this package (bsp, ubep, deepep_ll)
naming the mechanisms it uses, each with its source, and holding the code it alone runs (its
twin: ubepsim/reference/protocols/, the same names); what the mechanisms mean is written here,
once, and so is the registry (PROTOCOLS), whose order gives the protocols' codes.

The kernel's stages read a configuration's mechanisms once (`mechanisms`) and branch on them,
never on the protocol; the twin (ubepsim.reference.state) reads the same row, and the host reads
its columns for the lowering to cycles, the bounds, the memory and the parameters a protocol
reads (ubepsim.model.costs, memory, params). A new protocol is a module here with the code of
any mechanism it alone brings (a stage calls it where its mechanism says), its twin module,
its line in PROTOCOLS, its docs and its tests (docs/model.md, "Protocols").
"""

from collections import namedtuple

import numpy as np

from ..jit import njit
from ..layout import (READ, RECEIVE_CUMSUM, RECEIVE_GROUP, RECEIVE_SLOTS, SW, THEN_FENCE,
                      THEN_SYNCALL)
from . import bsp, deepep_ll, ubep

# READ (kernels/layout.py): a column whose value is a parameter's code may instead read the
# configuration's parameter.

# The mechanisms, one column each. Dispatch:
# RECEIVE: how the receivers place the copies, and so which steps they run (layout: RECEIVE_*;
#   RECEIVE_ROLES below). RECEIVE_GROUP: the count messages come from a group of cores of their
#   own (`cumsum_cores`, UBEP's CalCumSum group, paper Fig. 5(b)) beside the token cores, in one
#   phase with them: the group polls the sources' counts with a partial prefix sum each, then
#   publishes the offsets with one local store, which the token cores poll before their
#   Token-Reordering. Otherwise every core sends the counts after the token phase
#   (COUNTS_AFTER), then receives: RECEIVE_SLOTS, each (local expert, source) pair's copies
#   land in slots of their own, so no prefix sum places them: every core takes a share of the
#   pairs, polls each pair's count and copies its copies out (DeepEP's receive);
#   RECEIVE_CUMSUM, every core polls its share of the counts, then SyncAll, CalCumSum,
#   SyncAll, Token-Reordering (CANN EP).
# COUNTS_AFTER: without a count group, what the counts wait for: THEN_SYNCALL, a SyncAll once
#   every store of the die was acknowledged (CANN EP, Fig. 2); THEN_ISSUED, every core's last
#   copy issued (DeepEP: each expert's count follows a finish counter its senders add to after
#   each put; modelled die-wide, the counters being read one local latency after the last).
# PER_EXPERT: a die signals each destination per expert, not once: in dispatch a count message
#   per (destination, local expert), each one expert's count, from the core that owns the
#   expert (cores share them as q = destination x experts-per-die + expert: DeepEP's responsible
#   warp group per expert), each polled by its (expert, source) pair's receiver (so only with
#   RECEIVE_SLOTS); in combine a status per (destination, own local expert), the receivers
#   polling every source's. Else one count message per destination carries its experts' counts,
#   and one status per destination.
# SIGNALLED_COPIES: each token copy signals its own arrival by the configuration's Data-as-Flag
#   variant, and its receiver polls that before it takes the copy, in both ops. Without it what
#   is polled is the counts (and combine's statuses), which a barrier or ORDERED puts after the
#   copies.
# ORDERED: a count or status travels behind its data on one queue (DeepEP: one QP per expert),
#   so a receiver takes each copy as soon as it is there, without polling it (the model takes it
#   no earlier than it is visible). Without it, what is polled is ordered by a barrier or fence.
# SYNC: the Data-as-Flag variant of the count messages (and signalled copies): READ, the
#   `sync` parameter's; or the protocol's own (DeepEP's count word is its own signal, never 0,
#   cleared for the next launch: sentinel polling).
# TOKEN_PRELOAD: a sending core loads (and quantizes) each of its tokens once, at Init, and pays
#   the destination's address per switch (UBEP, DeepEP); without it it loads the token per copy
#   and counts the copy's predecessors to its expert (CANN's send loop).
# DEAL: how the copies are dealt to the token cores: READ, by `schedule` (Section 3.3); or a
#   fixed deal (DeepEP: a core per token, all its top-k copies, as token_order).
# HEADER_BYTES: bytes a copy carries beside its token (DeepEP: the source token's index, 16 B).
# EXPERT_CORES: the cores (`cores`) a configuration runs unless it names them: 0, the profile's;
#   g > 0, a core per expert in whole groups of g, g x ceil(experts / g) (DeepEP's June 2025
#   launch: 3 warp groups per SM on ceil(experts / 3) SMs; ubepsim.model.params.default_cores).
# Combine:
# RETURN_DEAL: how the returned copies are dealt: READ, by `schedule` as dispatch's; or a fixed
#   deal (CANN's V1 splits by destination: expert_block on the plain walk; DeepEP runs a warp
#   group per (local expert, destination) pair, every warp group at once, and its NIC interleaves
#   their QPs: balanced, equal contiguous slices of the die's walk, which starts at the next
#   die. Slices in the order every rank shares (token_order) would have the ports, first come
#   first served, take one destination at a time from every die: an incast DeepEP does not have).
# RETURN_STATUS: after its copies, a status to each destination a core owns, which the
#   receivers poll (every source's), then SyncAll, then reduce (CANN's V1; DeepEP's flag per
#   expert and grid sync). Without it each token is reduced once its copies are there.
# STATUS_AFTER: what a status waits for: THEN_FENCE, its core's earlier stores acknowledged
#   (V1's PipeBarrier); THEN_NEXT, nothing (DeepEP: the flag follows the copies on their QP).
# HIDDEN_SPLIT: where a die holds fewer tokens than cores, the cores split each token's hidden
#   dimension in the reduction (V1's reduce split; ubepsim.model.costs prices it).
(RECEIVE, COUNTS_AFTER, PER_EXPERT, SIGNALLED_COPIES, ORDERED, SYNC, TOKEN_PRELOAD, DEAL,
 HEADER_BYTES, EXPERT_CORES, RETURN_DEAL, RETURN_STATUS, STATUS_AFTER, HIDDEN_SPLIT) = range(14)
Mechanisms = namedtuple("Mechanisms", (
    "receive", "counts_after", "per_expert", "signalled_copies",
    "ordered", "sync", "token_preload", "deal", "header_bytes", "expert_cores", "return_deal",
    "return_status", "status_after", "hidden_split"))

# The protocols, registered once, in the order of their codes: ubepsim.model.params.Protocol is
# made of their names. A protocol's row of MECHANISMS is what its module names.
PROTOCOLS = (bsp, ubep, deepep_ll)
NAMES = tuple(p.__name__.rsplit(".", 1)[1] for p in PROTOCOLS)
MECHANISMS = np.array([[p.MECHANISMS[f] for f in Mechanisms._fields] for p in PROTOCOLS],
                      np.int64)
# (V1's statuses are flags behind their core's fence, never verified or re-armed: sw)
STATUS_SYNC = SW
# The steps each mechanism's value runs, as the roles of a die's AIVs, in core order: each role's
# steps are its timeline (layout.DISPATCH_TIMELINE; a count group's `cumsum_cores` AIVs come
# first). A combine's AIVs all take the last role's (UBEP's token group), and their steps follow
# RETURN_STATUS (layout.COMBINE_TIMELINE: CANN's V1 and DeepEP's statuses, or direct).
RECEIVE_ROLES = {RECEIVE_CUMSUM: ("bsp",), RECEIVE_GROUP: ("cumsum", "token"),
                 RECEIVE_SLOTS: ("fixed",)}
RETURN_STATUS_STEPS = ("direct", "statuses")


@njit
def mechanisms(protocol):
    """A protocol's MECHANISMS row, as the stages read it (see Mechanisms)."""
    r = MECHANISMS[protocol]
    return Mechanisms(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11],
                      r[12], r[13])


@njit(inline="always")
def per_dest(m, EL):
    """The count messages (dispatch) or statuses (combine) a die sends each destination:
    PER_EXPERT, one per expert (EL of them); else one. (A count per expert is polled per
    (expert, source) pair, so PER_EXPERT goes with RECEIVE_SLOTS: tests/test_mechanisms.py.)"""
    return EL if m.per_expert else 1


def per_dest_of(protocol, EL):
    """per_dest for the host and the twin: protocol codes and experts per die, scalars or
    numpy columns."""
    return np.where(uses(protocol, PER_EXPERT) == 1, EL, 1)


@njit(inline="always")
def v1_phases(m):
    """Whether a combine's phases on the critical path are CANN's V1's, shared by the die's
    AIVs (statuses behind each AIV's fence, then SyncAll); else the last AIV's own buckets."""
    return m.return_status == 1 and m.status_after == THEN_FENCE


@njit(inline="always")
def by_core(m):
    """Whether a dispatch's phases on the critical path are its last AIV's own time buckets:
    wherever no SyncAll splits the die's AIVs into phases they share (CANN EP's)."""
    return m.counts_after != THEN_SYNCALL


def roles(protocol, cores: int, cumsum_cores: int, combine: bool) -> list[tuple[int, str]]:
    """(AIVs, role) of a die, in core order (RECEIVE_ROLES): in a dispatch its receive's roles,
    a count group's `cumsum_cores` AIVs first; in a combine every AIV takes the last role."""
    named = RECEIVE_ROLES[int(uses(protocol, RECEIVE))]
    if combine or len(named) == 1:
        return [(cores, named[-1])]
    return [(cumsum_cores, named[0]), (cores - cumsum_cores, named[1])]


def combine_steps(protocol) -> str:
    """Which of layout.COMBINE_TIMELINE a protocol's combine runs (RETURN_STATUS_STEPS)."""
    return RETURN_STATUS_STEPS[int(uses(protocol, RETURN_STATUS))]


def of(protocol) -> Mechanisms:
    """A protocol's MECHANISMS row as Python ints, for the twin (ubepsim.reference)."""
    return Mechanisms(*(int(x) for x in MECHANISMS[protocol]))


def uses(protocol, mechanism):
    """A protocol's value of `mechanism` (0 or 1 for a yes-or-no one); protocol a code, or a
    numpy column of codes."""
    return MECHANISMS[np.asarray(protocol, dtype=np.int64), mechanism]


def chosen(fixed, parameter):
    """A column that may READ a parameter: the protocol's fixed value, or the parameter's
    (scalars or numpy columns)."""
    return fixed + (fixed == READ) * (parameter - fixed)


jit_chosen = njit(inline="always")(chosen)   # the same rule, for the kernel
