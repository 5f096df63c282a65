"""The plain-Python twin of the model: slow, written for clarity, the specification in code.

The Numba kernels (ubepsim.kernels) must agree with it exactly, cycle for cycle; the tests
compare them on hundreds of random small configurations. Nothing here is shared with the kernels
except the lowering of parameters to cycle costs (ubepsim.sweep.costs) and the popularity
weights (ubepsim.sweep.workload): the generator, routing, schedules, search, egress arbitration,
ingress queues, polls and phases are written again, the obvious way (a heap of events, a loop
per poll). Each stage is a function of the same name as the kernel's, in a module of the same
name.

The model in short:
- Each die's AIVs run instruction streams. A store occupies its AIV for its issue cost, then
  queues on the die's egress port (FIFO by request time, ties by AIV), is in flight for half the
  hop latency, queues on the destination's ingress port (FIFO by arrival, ties by source die and
  that die's store order) and becomes visible when the ingress port has taken it. The sender sees
  it complete (fences, in-flight slots) a full hop latency after it left the egress port. Stores
  to the die itself skip both ports and are visible after the local latency.
- A poll reads the poller's own memory: each costs the local latency and sees a value only if it
  was visible when the poll was issued.
- The Data-as-Flag variant (sync.POLICY) says what each signalled store adds on the sender and
  the receiver.
"""

from __future__ import annotations

from ..sweep.params import Config
from ..sweep.profile import Profile
from .egress import egress_phase
from .ingress import ingress
from .programs import count_programs, init, token_programs
from .receive import bsp_cumsum, poll_counts, publish_offsets, reorder
from .results import result_row
from .routing import route
from .schedule import schedule
from .state import (BSP_COUNTS_SENT, BSP_REORDERED, BSP_SENT, BSP_SYNCALL_1, BSP_VERIFIED,
                    UBEP_COUNTS, UBEP_REORDERED, UBEP_SENT, Die, Run)
from .sync import syncall


def simulate(cfg: Config, profile: Profile) -> dict:
    """Every result of one configuration, plus `_detail` for the invariant tests."""
    run = Run.of(cfg, profile)
    plan = schedule(run, route(cfg))
    dies = [Die(run, s, plan.dies[s].copies) for s in range(run.ranks)]
    C = run.cumsum_aivs
    for s, (die, dealt) in enumerate(zip(dies, plan.dies)):
        init(run, dealt, die)
        tokens = token_programs(run, s, dealt, die)
        if run.ubep:
            # Figure 5(b): the token group sends its copies while the CalCumSum group counts
            # and sends the counts
            counts = count_programs(run, s, dealt, die, C, "cumsum")
            egress_phase(run, s, die, tokens | counts, UBEP_SENT)
        else:
            # Figure 2: Token-Sending, SyncAll, SendFlag & Count, every AIV in every phase
            egress_phase(run, s, die, tokens, BSP_SENT)
            syncall(die.aivs, die.settled(), run.c["syncall"], BSP_SYNCALL_1)
            counts = count_programs(run, s, dealt, die, run.aivs, "sync")
            egress_phase(run, s, die, counts, BSP_COUNTS_SENT)
    ingress(run, dies)
    for d, die in enumerate(dies):
        if run.ubep:
            # the CalCumSum group polls and sums the counts and publishes the offsets; each
            # token AIV waits for them, then reorders each copy once its signal is seen
            poll_counts(run, dies, d, die.aivs[:C], UBEP_COUNTS)
            offsets = publish_offsets(run, die.aivs[:C])
            reorder(run, dies, d, die.aivs[C:], offsets, UBEP_REORDERED)
        else:
            # Flag verification, SyncAll, CalCumSum, SyncAll, Token-Reordering
            poll_counts(run, dies, d, die.aivs, BSP_VERIFIED)
            bsp_cumsum(run, die.aivs)
            reorder(run, dies, d, die.aivs, None, BSP_REORDERED)
    return result_row(run, plan, dies)
