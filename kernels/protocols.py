"""Protocols as data: each protocol is one row of MECHANISMS, the mechanisms it uses.

A protocol is registered here once, by its row. The kernel's stages read a configuration's row
once (`mechanisms`) and branch on its mechanisms, never on the protocol's code; the twin
(ubepsim.reference.state) reads the same row, and the host reads its columns for the lowering
to cycles, the bounds, the memory and the parameters a protocol reads (ubepsim.sweep.costs,
memory, params). A new protocol is a row here, the code of any mechanism it brings (in the
stage that runs it, and the twin's), its docs and its tests.
"""

from collections import namedtuple

import numpy as np

from .jit import njit
from .layout import BSP, UBEP

# The mechanisms, one column each. Dispatch:
# COUNT_GROUP: the count messages come from a group of cores of their own (`cumsum_aivs`, UBEP's
#   CalCumSum group, paper Fig. 5(b)) beside the token cores, in one phase with them: the group
#   polls the sources' counts with a partial prefix sum each, then publishes the offsets with
#   one local store, which the token cores poll before their Token-Reordering. Without it
#   (CANN EP, Fig. 2): every core sends the counts after the token phase's SyncAll, every core
#   polls them, CalCumSum runs between two SyncAlls on every core, then every core reorders.
# SIGNALLED_COPIES: each token copy signals its own arrival by the configuration's Data-as-Flag
#   variant (`sync`), and its receiver polls that before it takes the copy, in both ops. Without
#   it a barrier orders the copies before what is polled (the counts; combine's statuses).
# TOKEN_PRELOAD: a sending core loads each of its tokens once, at Init, and pays the
#   destination's address per switch (UBEP); without it it loads the token per copy and counts
#   the copy's predecessors to its expert (CANN's send loop).
# Combine:
# SCHEDULED_RETURN: the returned copies are dealt to the cores by `schedule` (Section 3.3), as
#   dispatch's are; without it by expert_block on the plain walk (V1 splits by destination).
# RETURN_STATUS: behind each core's fence, a status to each destination it owns; the receivers
#   poll every source's status, SyncAll, then reduce (CANN's V1 combine). Without it each
#   token is reduced once its copies are there.
# HIDDEN_SPLIT: where a die holds fewer tokens than cores, the cores split each token's hidden
#   dimension in the reduction (V1's reduce split; ubepsim.sweep.costs prices it).
(COUNT_GROUP, SIGNALLED_COPIES, TOKEN_PRELOAD, SCHEDULED_RETURN, RETURN_STATUS,
 HIDDEN_SPLIT) = range(6)
Mechanisms = namedtuple("Mechanisms", ("count_group", "signalled_copies", "token_preload",
                                       "scheduled_return", "return_status", "hidden_split"))

# The protocols, by the code of ubepsim.sweep.params.Protocol.
MECHANISMS = np.zeros((2, len(Mechanisms._fields)), np.int64)
MECHANISMS[BSP, [RETURN_STATUS, HIDDEN_SPLIT]] = 1
MECHANISMS[UBEP, [COUNT_GROUP, SIGNALLED_COPIES, TOKEN_PRELOAD, SCHEDULED_RETURN]] = 1


@njit
def mechanisms(protocol):
    """A protocol's MECHANISMS row, as the stages read it (see Mechanisms)."""
    row = MECHANISMS[protocol]
    return Mechanisms(row[COUNT_GROUP], row[SIGNALLED_COPIES], row[TOKEN_PRELOAD],
                      row[SCHEDULED_RETURN], row[RETURN_STATUS], row[HIDDEN_SPLIT])


def of(protocol) -> Mechanisms:
    """A protocol's MECHANISMS row as Python ints, for the twin (ubepsim.reference)."""
    return Mechanisms(*(int(x) for x in MECHANISMS[protocol]))


def uses(protocol, mechanism):
    """Whether `protocol` (a code, or a numpy column of codes) uses `mechanism`: 0 or 1."""
    return MECHANISMS[np.asarray(protocol, dtype=np.int64), mechanism]
