"""Results and phases are declared once (kernels/layout.py RESULTS, PHASES and the timeline
tables): the kernel's output slots, its time buckets and its phase marks follow the declaration,
and each host reader covers exactly what it declares. That a result its op does not give is 0
is checked on every configuration of tests/test_combine.py."""

from __future__ import annotations

from ubepsim.kernels import layout
from ubepsim.model.kernel_io import HOST_RESULTS
from ubepsim.model.params import Op
from ubepsim.model.result_fields import RESULTS, phase_column, phases_of


def test_the_kernels_slots_follow_the_declaration():
    """Each result in a kernel unit has its own slot, the rest none; the kernel writes the
    phases and the hop classes by offset (O_PHASE0 + bucket, O_COPIES_HOP0 + hop class), so
    those slots run in declared order; bucket i is phase i."""
    slots = [f.slot for f in RESULTS if f.slot is not None]
    assert len(set(slots)) == len(slots) and max(slots) < layout.N_OUT
    assert {f.name for f in RESULTS if f.slot is None} == \
        {r.name for r in layout.RESULTS if r.unit not in layout.KERNEL_UNITS}
    by_name = {f.name: f.slot for f in RESULTS}
    for i, p in enumerate(layout.PHASES):
        assert by_name[phase_column(p.name)] == layout.O_PHASE0 + i
        assert getattr(layout, f"B_{p.name.upper()}") == i
    assert layout.N_BUCKETS == len(layout.PHASES)
    for i, h in enumerate(layout.HOP_CLASSES):
        assert by_name[f"copies_{h}"] == layout.O_COPIES_HOP0 + i
    # the invariant checks' slots are no result's
    checks = {layout.O_SENT, layout.O_DELIVERED, layout.O_VIOLATIONS, layout.O_BOUND}
    assert not checks & set(slots) and len(checks) == 4


def test_the_host_computes_exactly_the_results_the_kernel_does_not():
    assert set(HOST_RESULTS) == {f.name for f in RESULTS if f.slot is None}


def test_each_op_has_its_phases():
    """Dispatch's critical path has no reduction, combine's no CalCumSum nor reordering, a
    layer's every phase; the split columns follow their op."""
    names = {op: [p.name for p in phases_of(op)] for op in Op}
    assert names[Op.dispatch] == ["init", "send", "sync", "cumsum", "reorder"]
    assert names[Op.combine] == ["init", "send", "sync", "reduce"]
    assert names[Op.layer] == [p.name for p in layout.PHASES]
    given = {f.name: f.ops for f in RESULTS}
    assert given["dispatch_us"] == (Op.dispatch, Op.layer)
    assert given["combine_us"] == (Op.combine, Op.layer)
    assert given["expert_us"] == (Op.layer,)


def test_the_timeline_tables_name_every_mark_interval():
    """An AIV's phase x runs from its mark x to x + 1: every timeline starts with Init, which
    ends at MARK_INIT; the roles each RECEIVE value runs are the dispatch timelines, each once,
    and RETURN_STATUS's steps are combine's; every phase written is described, and only
    those."""
    from ubepsim.kernels import protocols

    for timeline in (*layout.DISPATCH_TIMELINE.values(), *layout.COMBINE_TIMELINE.values()):
        assert layout.ends(timeline, "init") == (layout.MARK_INIT,)
    roles = [r for named in protocols.RECEIVE_ROLES.values() for r in named]
    assert sorted(roles) == sorted(layout.DISPATCH_TIMELINE)
    assert sorted(protocols.RETURN_STATUS_STEPS) == sorted(layout.COMBINE_TIMELINE)
    assert len(layout.DISPATCH_TIMELINE["token"]) < len(layout.DISPATCH_TIMELINE["bsp"])
    written = {p for table in (layout.DISPATCH_TIMELINE, layout.COMBINE_TIMELINE)
               for phases in table.values() for p in phases} | {layout.LAYER_GAP}
    assert set(layout.TIMELINE_PHASES) == written
