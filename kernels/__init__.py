"""Numba kernels of ubepsim (installed as ubepsim.kernels). Arrays and scalars in, arrays out.

One module per stage of a dispatch or a combine, named after the paper's (or CANN's)
mechanism, each stage a function of the same name as the plain-Python twin's
(ubepsim.reference):

- layout: every code and column shared with the host (parameters P_*, costs C_* from COSTS),
  the results and phases declared once (RESULTS and PHASES, whose slots O_* and time buckets
  B_* follow from them), the charges (STORE_WORK: what a store costs its AIV and how often;
  FLOOR: what no op can skip), store kinds, phase marks and the timeline's phases, bit layouts, the
  stages' named results;
- routing: each die's tokens to their top-k experts (`route_die`, `route`);
- schedule: hierarchical token-level scheduling, Section 3.3 (`hop_classes`, `walk`,
  `count_keys`, `expert_block_slices`, `balanced_slices`, `homogenized_deal` (latency
  homogenization), `slices`, `deal_copies`, `quaternary_search` of Algorithm 1, `qsteps_table`,
  `init_work`, `hop_counts`, and the stage, `schedule`); combine's (`receive_order`,
  `deal_returns`, `return_schedule`);
- protocols: each protocol a module naming the mechanisms it uses and holding the code it alone
  runs (`bsp`, `ubep`, `deepep_ll`), registered once (`PROTOCOLS`), as one table
  (`MECHANISMS`, decoded once per configuration by `mechanisms`; `per_dest`, `v1_phases`,
  `by_core`);
- sync: the Data-as-Flag variants, Section 3.4, as one table of effects (`POLICY`, decoded once
  per configuration by `effects`) and SyncAll (`syncall`);
- programs: each die's Init and store programs, Section 2.3 (`init_phase`, `new_store`,
  `token_programs`, `count_programs`, V1 combine's `status_programs`);
- fabric: one fabric for every die: the AIVs replaying their programs on their dies' ports, the
  tier links and every destination's ingress port, whose acknowledgements return the senders'
  credits (`fabric`, the event loop, with its queues `ring_push`, `heap_push`, `heap_pop`;
  `kind_table`, combine's `return_kinds`, each kind's work from layout's charges `store_work`,
  `preceded_work`, `outstanding`, `begin_phase`, `end_phase`, `turn`,
  `barrier`);
- polls: a receiver's steps (`poll`, `seen`, `take`, `close_step`, `die_ends`);
- receive: counts with CalCumSum, Token-Reordering, Section 3.2 (`poll_counts`, `reorder`, and
  the stage, `receive`, which calls a protocol's own step: `protocols.bsp.bsp_cumsum`,
  `protocols.ubep.publish_offsets`, DeepEP's fixed slots' `protocols.deepep_ll.pair_receive`);
- reduce: combine's receivers, each token's copies reduced (`reduce_tokens`, and the stage,
  `reduce`);
- results: the output row (`phases`, `combine_phases`, `reach`, `latency_bound`,
  `return_bound`, from layout's charges `op_floor`, `store_floor`, `result_row`,
  `combine_row`, `layer_row`);
- dispatch, combine: the drivers of one configuration's dispatch and combine, stage by stage
  (`dispatch_stages`, `dispatch`, `new_stores`, `working_bytes`; `combine_stages`, `combine`,
  `new_return_stores`, `working_bytes`);
- layer: a layer (`layer`), and the parallel loops over configurations, one per op
  (`op_batch` makes each, `BATCH` holds them: an op is compiled when first asked for;
  `same_schedule`), behind `simulate_batch`, which hands each its rows;
- rng: the counter-based generator; jit: the Numba flags and the compiled-code cache.
"""
