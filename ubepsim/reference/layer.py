"""One configuration, whatever its op: dispatch, combine, or a layer (dispatch, each die's
experts, combine), as the kernel's kernels/layer.py runs them."""

from __future__ import annotations

from ..model.params import Config, Op
from ..model.profile import Profile
from .combine import combine
from .dispatch import dispatch
from .programs import launch_starts
from .results import combine_row, layer_row, result_row
from .routing import route
from .schedule import return_schedule, schedule
from .state import Run

EXPERT_SHIFT = 10   # the lowering's expert_copy is in 1/1024 cycles per copy


def simulate(cfg: Config, profile: Profile) -> dict:
    """Every result of one configuration, plus `_detail` for the invariant tests."""
    run = Run.of(cfg, profile)
    tokens = route(cfg)
    if cfg.op is Op.dispatch:
        plan = schedule(run, tokens)
        return result_row(run, plan, dispatch(run, plan))
    returns = return_schedule(run, tokens)
    if cfg.op is Op.combine:
        starts = launch_starts(run)
        return combine_row(run, returns, combine(run, returns, starts), starts)
    return layer(run, tokens, returns)


def layer(run: Run, tokens: list[list[list[int]]], returns) -> dict:
    """Dispatch; then each die's experts compute for expert_fixed_us and expert_ns_per_copy per copy
    it received, from when its last AIV finished the dispatch; then each die's combine from
    then, its ports taking combine's stores after the dispatch's."""
    plan = schedule(run, tokens)
    dispatched = dispatch(run, plan)
    c = run.c
    # per copy in 1/1024 cycles, the sum rounded up
    experts = [c["expert"] + ((len(die.copies) * c["expert_copy"] + (1 << EXPERT_SHIFT) - 1)
                              >> EXPERT_SHIFT) for die in returns.dies]
    starts = [die.end() + e for die, e in zip(dispatched, experts)]
    combined = combine(run, returns, starts,
                       [(die.egress_free, die.ingress_free) for die in dispatched])
    return layer_row(run, plan, dispatched, returns, combined, experts, starts)
