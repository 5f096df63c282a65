"""ubep: the twin of kernels/protocols/ubep.py's own code, the count group's offsets."""

from __future__ import annotations

from ..state import Core, Run


def publish_offsets(run: Run, group: list[Core]) -> int:
    """When the token AIVs can see the offsets: the CalCumSum group publishes them with one
    local store once its last AIV is done."""
    return max(a.t for a in group) + run.c["signal_issue"] + run.c["lat_local"]
