"""The plain-Python twin of the model: slow, written for clarity, the specification in code.

The Numba kernels (ubepsim.kernels) must agree with it exactly, cycle for cycle; the tests
compare them on hundreds of random small configurations. Nothing here is shared with the kernels
except the lowering of parameters to cycle costs (ubepsim.model.costs), the popularity weights
(ubepsim.model.workload), each protocol's table of mechanisms (kernels/protocols, plain Python),
the table of charges (what a store costs its AIV and how often, and what no op can skip:
kernels/layout.py STORE_WORK, FLOOR) and the names of the results, phases and ports (declared in
kernels/layout.py; the results' read through ubepsim.model.result_fields): the generator,
routing, schedules, search, egress arbitration, ingress queues, polls and phases are written
again, the obvious way (a heap of events, a loop per poll). Each stage is a function of the same
name as the kernel's, in a module of the same name (docs/model.md's table names each pair): the
drivers `dispatch.dispatch`, `combine.combine` and `layer.layer` (with `layer.simulate`, one
configuration of any op), and the stages they run.

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
- Combine returns every copy to its source die, where each token's copies are reduced
  (docs/model.md, "Combine").
"""

from __future__ import annotations

from .layer import simulate

__all__ = ["simulate"]
