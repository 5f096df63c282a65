"""kernels/slots.py holds every slot of the kernels' rows and matrices as a literal line, so that
grep finds where `C_DEST_SWITCH` is defined; it is generated from layout's tables and held to
them here. Regenerate after changing a table: `python tests/test_slots.py > kernels/slots.py`."""

from __future__ import annotations

from pathlib import Path

from ubepsim.kernels import layout

SLOTS = Path(__file__).resolve().parent.parent / "kernels" / "slots.py"
# (prefix, the table the slots index, what a slot is)
TABLES = (
    ("B", lambda: [p.name for p in layout.PHASES], "a critical-path bucket (layout.PHASES)"),
    ("O", lambda: list(layout.OUTPUTS), "a column of the kernel's result row (layout.OUTPUTS)"),
    ("C", lambda: list(layout.COSTS), "a column of the cost matrix (layout.COSTS)"),
)


def slots_text() -> str:
    lines = ['"""Slots of the kernels\' rows and matrices, one literal line each so that grep finds',
             "them: generated from the tables in layout.py by `python tests/test_slots.py >",
             'kernels/slots.py`, and held to them by tests/test_slots.py."""']
    for prefix, names, what in TABLES:
        lines += ["", f"# {prefix}_X: {what}"]
        lines += [f"{prefix}_{name.upper()} = {i}" for i, name in enumerate(names())]
    return "\n".join(lines) + "\n"


def test_the_slots_are_their_tables():
    assert SLOTS.read_text() == slots_text(), \
        "kernels/slots.py is stale: python tests/test_slots.py > kernels/slots.py"


def test_every_slot_is_a_distinct_index_of_its_table():
    for prefix, names, _ in TABLES:
        values = [getattr(layout, f"{prefix}_{n.upper()}") for n in names()]
        assert values == list(range(len(values)))


if __name__ == "__main__":
    print(slots_text(), end="")


def test_the_texts_are_the_hosts_and_every_result_has_one():
    """A result's help and a phase's title live on the host (model.result_fields), so that
    editing one recompiles no kernel: the kernels' tables hold none, and every result and phase
    has its text there, and nothing else does."""
    from ubepsim.model.result_fields import HELP, PHASE_TEXT
    assert "help" not in layout.Result._fields and layout.Phase._fields == ("name", "ops")
    assert set(HELP) == {r.name for r in layout.RESULTS}
    assert set(PHASE_TEXT) == {p.name for p in layout.PHASES}
