"""The charges table (kernels/layout.py STORE_WORK, FLOOR) against what kernel and twin charge.

Both read the table, so their agreement alone would not catch a charge read wrongly by both. Here
one cost column of the lowering is raised by DELTA and each store's issue moves, on the twin, by
DELTA times the stores of its AIV, up to it, that pay the charge as the table says how often,
counted here from the stores themselves; the kernel then agrees with the twin on the latency and
every AIV's phase marks, and the latency lower bounds move by what FLOOR and STORE_WORK say.
"""

from __future__ import annotations

import numpy as np
import pytest

from ubepsim import reference
from ubepsim.kernels import layer, layout
from ubepsim.kernels.layout import (ADDRESS, EACH, FLOOR, MARKED, NEW_DEST, PER_EXPERT,
                                    PRECEDED, STORE_WORK, TOPK)
from ubepsim.model import api, kernel_io
from ubepsim.model.costs import COST_INDEX, lower
from ubepsim.model.params import Op, make_config
from ubepsim.model.profile import load_profile
from ubepsim.reference import state

# ports no store waits for and a window no AIV fills (as tests/test_mechanisms.py's FREE): an
# AIV's first phase is its own work and issues, nothing else
FREE = load_profile(overrides={"egress_gbps": 1e5, "ingress_gbps": 1e5,
                               "blocks_in_flight": 1 << 16})
DELTA = 1000
SENT = 2   # every AIV's mark ending its first phase of stores (dispatch's and combine's)
# dc: its marker work per copy, a checksum per destination, no fence; each protocol's way of
# loading addresses; counts in the first phase (ubep's CalCumSum group); both ops
CASES = [
    {"protocol": "ubep", "op": "dispatch"},
    {"protocol": "bsp", "op": "dispatch"},
    {"protocol": "ubep", "op": "combine"},
    {"protocol": "bsp", "op": "combine"},
]
BASE = {"ranks": 4, "experts": 16, "batch": 6, "topk": 3, "cores": 4, "cumsum_cores": 1,
        "sync": "dc", "schedule": "homogenized", "seed": 3}


def _raised(cost: str, by: int):
    """The lowering with one cost column raised by `by` cycles."""
    def lowered(cols, profile):
        costs, chances = lower(cols, profile)
        costs = costs.copy()
        costs[:, COST_INDEX[cost]] += by
        return costs, chances
    return lowered


def _twin(cfg, cost, by, monkeypatch):
    monkeypatch.setattr(state, "lower", _raised(cost, by))
    return reference.simulate(cfg, FREE)


def _kernel(cfg, cost, by):
    """The kernel's output row and every AIV's marks, on the lowering raised."""
    params, costs, *rest = kernel_io.prepare(cfg.columns(), FREE)
    costs = costs.copy()
    costs[:, COST_INDEX[cost]] += by
    out = np.zeros((1, layout.N_OUT))
    marks = np.zeros((cfg.ranks, cfg.cores, api.MARKS), np.int64)
    layer.simulate_batch(params, costs, *rest, out, marks)
    return out[0], marks


def _paid(cost, run, stores) -> list[int]:
    """How many times each store, in its AIV's program order, pays cost column `cost` by the
    STORE_WORK charges of its kind (the table's word for how often, read here apart from
    kernel and twin)."""
    out, last = [], None
    for st in stores:
        new = st["dst"] != last
        last = st["dst"]
        n = 0
        for w in STORE_WORK:
            if w.cost != cost or w.at != st["costs"]:
                continue
            if w.per == PER_EXPERT:
                n += run.e_local // run.per_dest
            elif w.per == MARKED:
                n += int(run.copy_sync.marker_work_per_copy)
            elif w.per == NEW_DEST or (w.per == ADDRESS and run.mech.token_preload):
                n += int(new)
            elif w.per == PRECEDED:     # a dispatched copy's ref: its index at its die
                n += int(bool(run.c["copy_count"]) and st["ref"] > 0)
            else:
                assert w.per in (EACH, ADDRESS)
                n += 1
        out.append(n)
    return out


def _first_phase_moves(cfg, cost, base, raised) -> tuple[bool, bool]:
    """Asserts that each store of an AIV's first phase moved by DELTA times what it and the
    AIV's stores before it pay of `cost`; (whether any paid it, the op's own)."""
    kind = "returns" if cfg.op == Op.combine else "stores"
    run = state.Run.of(cfg, FREE)
    paid_any = False
    for d, (before, after) in enumerate(zip(base["_detail"][kind], raised["_detail"][kind])):
        for a in range(cfg.cores):
            # an AIV's stores of its first phase, in program order (its port serves them so)
            mine = [st for st in before if st["core"] == a and
                    st["issue_end"] <= base["_detail"]["marks"][d][a][SENT]]
            moved = [st for st in after if st["core"] == a][:len(mine)]
            paid = np.cumsum(_paid(cost, run, mine)).tolist()
            # from the end of its Init, which a cost may lengthen too (vcount: the search)
            init = raised["_detail"]["marks"][d][a][layout.MARK_INIT] - \
                base["_detail"]["marks"][d][a][layout.MARK_INIT]
            got = [(y["issue_end"] - x["issue_end"] - init) / DELTA for x, y in zip(mine, moved)]
            assert got == paid, (cfg, d, a)
            paid_any |= bool(paid and paid[-1])
    return paid_any


@pytest.mark.parametrize("cost", sorted({w.cost for w in STORE_WORK}))
def test_each_store_pays_each_charge_as_often_as_the_table_says(cost, monkeypatch):
    """On each protocol's dispatch and combine, raising a STORE_WORK cost moves each store of
    an AIV's first phase by what the table says the stores up to it pay; where any does, the
    kernel's latency and every AIV's marks move with the twin's. Every such cost is paid
    somewhere."""
    paid_somewhere = False
    for case in CASES:
        cfg = make_config({**BASE, **case}, FREE.cores)
        base = _twin(cfg, cost, 0, monkeypatch)
        raised = _twin(cfg, cost, DELTA, monkeypatch)
        if not _first_phase_moves(cfg, cost, base, raised):
            continue
        paid_somewhere = True
        row, marks = _kernel(cfg, cost, DELTA)
        assert row[layout.O_LATENCY] == raised["_detail"]["latency_cycles"] > \
            base["_detail"]["latency_cycles"]
        first = 0 if cfg.op == Op.dispatch else layout.N_MARKS
        for d, die in enumerate(raised["_detail"]["marks"]):
            for a, twin in enumerate(die):
                assert marks[d, a, first:first + len(twin)].tolist() == twin, (case, d, a)
    assert paid_somewhere


@pytest.mark.parametrize("op", ["dispatch", "combine"])
def test_the_lower_bounds_move_by_the_charges_they_declare(op, monkeypatch):
    """Raising a cost raises kernel's and twin's latency bound by DELTA times its FLOOR count
    (TOPK: topk), or once for a STORE_WORK charge of the op's copies paid on every store or at
    its AIV's first window address, and not at all for any other."""
    cfg = make_config({**BASE, "protocol": "ubep", "op": op}, FREE.cores)
    at = "copy" if op == "dispatch" else "return"
    declared = {f.cost: cfg.topk if f.per == TOPK else 1 for f in FLOOR if f.at == op}
    for w in STORE_WORK:
        if w.at == at and w.per in (EACH, NEW_DEST, ADDRESS):
            declared[w.cost] = declared.get(w.cost, 0) + 1
    declared[f"{at}_issue"] = 1
    base_k = _kernel(cfg, "init", 0)[0][layout.O_BOUND]
    base_t = _twin(cfg, "init", 0, monkeypatch)["_detail"]["bound_cycles"]
    assert base_k == base_t
    for cost in {w.cost for w in STORE_WORK} | {f.cost for f in FLOOR} | {f"{at}_issue"}:
        k = _kernel(cfg, cost, DELTA)[0][layout.O_BOUND] - base_k
        t = _twin(cfg, cost, DELTA, monkeypatch)["_detail"]["bound_cycles"] - base_t
        assert k == t == DELTA * declared.get(cost, 0), cost
