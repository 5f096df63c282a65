"""Numba kernels of ubepsim (installed as ubepsim.kernels). Arrays and scalars in, arrays out.

One module per stage of a dispatch, named after the paper's mechanism, each stage a function of
the same name as the plain-Python twin's (ubepsim.reference):

- layout: every code and column shared with the host (parameters P_*, costs C_* from COSTS,
  results O_*), store kinds, time buckets, phase marks, bit layouts, the stages' named results;
- routing: each die's tokens to their top-k experts (`route_die`, `route`);
- schedule: hierarchical token-level scheduling, Section 3.3 (`hop_classes`, `walk`,
  `count_keys`, `expert_block_slices`, `balanced_slices`, `homogenized_deal` (latency
  homogenization), `deal_copies`, `quaternary_search` of Algorithm 1, `qsteps_table`,
  `init_work`, and the stage, `schedule`);
- sync: the Data-as-Flag variants, Section 3.4, as one table of effects (`POLICY`, decoded once
  per configuration by `effects`), and SyncAll (`syncall`);
- programs: each AIV's Init and store program, Section 2.3 (`init_phase`, `new_store`,
  `token_program`, `count_program`);
- egress: the AIVs replaying their programs on the die's egress port (`egress_phase`, the event
  loop, with `ring_push`; `kind_table`, `start_phase`, `account_phase`);
- ingress: each destination's ingress port (`ingress`, `arrival_order`, `sort_arrivals`);
- receive: polls, counts with CalCumSum, offsets, Token-Reordering, Section 3.2 (`poll`,
  `seen`, `poll_counts`, `publish_offsets`, `bsp_cumsum`, `reorder`, and the stage, `receive`);
- results: the output row (`phases`, `latency_bound`, `result_row`);
- dispatch: the driver (`dispatch`: one configuration, stage by stage, with `new_stores`;
  `simulate_dispatch`; `simulate_batch`, the parallel loop over configurations;
  `same_schedule`; `working_bytes`);
- rng: the counter-based generator; jit: the Numba flags and the compiled-code cache.
"""
