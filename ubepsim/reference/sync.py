"""Data-as-Flag (paper Section 3.4), decoded once into a table, and SyncAll.

sw, stop-and-wait: payload, fence, a separate flag the receiver polls. tff, token-flag fusion: a
flag inside every block. dc, data-for-checksum: the blocks, then one checksum per destination
that the receiver polls and verifies. sp, sentinel polling: the receiver polls the blocks
themselves, pre-filled with a sentinel, and re-arms them after use.

A signalled store is one whose receiver must learn that it has landed: the count messages under
both protocols, and the token copies under ubep only. bsp's copies carry no signal (its SyncAll
orders them before the counts), so they get `UNSIGNALLED`. The stages read the variant's
`POLICY`; none asks which variant it is.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model.params import Sync


@dataclass(frozen=True)
class DataAsFlag:
    """What a Data-as-Flag variant adds to each signalled store."""

    # on the sender
    flag_per_store: bool            # a separate flag store after each signalled store
    fence_before_flag: bool         # that flag waits until every earlier store of its AIV is
                                    # acknowledged
    checksum_per_destination: bool  # a checksum store after an AIV's last signalled store to
                                    # each destination
    marker_work_per_copy: bool      # the checksum's marker work on each token copy before it
                                    # is sent (copy_verify cycles)
    in_block_flag: bool             # a flag inside each block, leaving less payload per block:
                                    # more blocks per store (lowered by costs.lower)
    # on the receiver
    verify_per_block: bool          # check each polled store's flags, checksum or sentinel,
                                    # block by block (copy_verify, count_verify cycles)
    rearm_sentinel: bool            # write the sentinel back into each polled store's blocks
                                    # after use (copy_reset, count_reset cycles)
    timeout_on_collision: bool      # a payload equal to the sentinel is taken only after a
                                    # timeout (chance: costs.lower's collision chances)


# What each variant adds: an effect a row, a variant a column (in Sync's order).
#                                sw     tff    dc     sp
EFFECTS = {
    "flag_per_store":           (True,  False, False, False),
    "fence_before_flag":        (True,  False, False, False),
    "checksum_per_destination": (False, False, True,  False),
    "marker_work_per_copy":     (False, False, True,  False),
    "in_block_flag":            (False, True,  False, False),
    "verify_per_block":         (False, True,  True,  True),
    "rearm_sentinel":           (False, False, False, True),
    "timeout_on_collision":     (False, False, False, True),
}
POLICY: dict[Sync, DataAsFlag] = {
    sync: DataAsFlag(**{effect: row[sync] for effect, row in EFFECTS.items()}) for sync in Sync}
UNSIGNALLED = DataAsFlag(**dict.fromkeys(EFFECTS, False))


def syncall(cores: list, ready: int, cost: int, step: str = "syncall") -> None:
    """SyncAll: every AIV of the die waits, idle, until `cost` cycles after `ready` (when the
    last of them is ready), which ends its step `step` (a SyncAll; DeepEP's finish counters
    are a barrier of the same form)."""
    barrier = ready + cost
    for a in cores:
        a.spend("sync", barrier - a.t, waiting=True)
        a.mark(step)
