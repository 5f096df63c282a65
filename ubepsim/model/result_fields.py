"""Result fields of one configuration, as the host reads them.

Each result is declared once, in kernels/layout.py (RESULTS and PHASES: its name, unit, the ops
that give it, its help, and so its slot in the kernel's output row), since the kernel cannot
import the host; here each gets what the host adds: its Parquet type, its slot, its ops as
params.Op. The twin, kernel_io, `ubepsim run`, the docs generator and the plots read these.
"""

from __future__ import annotations

import dataclasses

from ..kernels import layout
from .params import Op

# A unit's Parquet type: the kernel's cycles and the bandwidth are reported as floats (us,
# GB/s), counts and bytes as integers.
DTYPES = {layout.US: "f8", layout.GBPS: "f8", layout.RATIO: "f8", layout.COUNT: "i8",
          layout.BYTES: "i8"}


@dataclasses.dataclass(frozen=True)
class ResultField:
    name: str
    dtype: str                 # "f8" or "i8"
    unit: str                  # layout.US, COUNT (the kernel's), BYTES, GBPS or RATIO (the host's)
    ops: tuple[Op, ...]        # the ops that give it; elsewhere it is 0
    help: str
    slot: int | None           # its column of the kernel's output row; None: the host's

    def given_by(self, op: Op) -> bool:
        return op in self.ops


def _field(r: layout.Result) -> ResultField:
    slot = getattr(layout, f"O_{r.name.removesuffix('_us').upper()}") \
        if r.unit in layout.KERNEL_UNITS else None
    return ResultField(r.name, DTYPES[r.unit], r.unit, tuple(Op(o) for o in r.ops), r.help,
                       slot)


RESULTS: tuple[ResultField, ...] = tuple(_field(r) for r in layout.RESULTS)
RESULT_NAMES = tuple(f.name for f in RESULTS)
FIELD_BY_NAME = {f.name: f for f in RESULTS}

# The phases of the critical path (layout.PHASES): each a result column, and a time bucket the
# twin's AIVs spend their cycles in by name.
PHASES = layout.PHASES
PHASE_NAMES = tuple(p.name for p in PHASES)


def phase_column(name: str) -> str:
    """The result column of phase `name`."""
    return f"phase_{name}_us"


def phases_of(op: Op) -> tuple[layout.Phase, ...]:
    """The phases on `op`'s critical path, in order."""
    return tuple(p for p in PHASES if op in p.ops)


# The split of a layer's critical path beside the phases: its experts' time, which no phase
# holds (a layer's phase columns and expert_us sum to its latency).
EXPERT_COLUMN = "expert_us"
