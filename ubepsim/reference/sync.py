"""Data-as-Flag (paper Section 3.4), decoded once into a table, and SyncAll.

A signalled store is one whose receiver must learn that it has landed: the count messages under
both protocols, and the token copies under ubep only. bsp's copies carry no signal (its SyncAll
orders them before the counts), so they get `UNSIGNALLED`. The stages read the variant's row
of `POLICY`; none asks which variant it is.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..params import Sync


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


UNSIGNALLED = DataAsFlag(flag_per_store=False, fence_before_flag=False,
                         checksum_per_destination=False, marker_work_per_copy=False,
                         in_block_flag=False, verify_per_block=False, rearm_sentinel=False,
                         timeout_on_collision=False)

POLICY: dict[Sync, DataAsFlag] = {
    # stop-and-wait: payload, fence, separate flag; the receiver polls the flag
    Sync.sw: DataAsFlag(flag_per_store=True, fence_before_flag=True,
                        checksum_per_destination=False, marker_work_per_copy=False,
                        in_block_flag=False, verify_per_block=False, rearm_sentinel=False,
                        timeout_on_collision=False),
    # token-flag fusion: a flag inside every block; the receiver polls and checks the blocks
    Sync.tff: DataAsFlag(flag_per_store=False, fence_before_flag=False,
                         checksum_per_destination=False, marker_work_per_copy=False,
                         in_block_flag=True, verify_per_block=True, rearm_sentinel=False,
                         timeout_on_collision=False),
    # data-for-checksum: blocks, then one checksum per destination that the receiver polls and
    # verifies
    Sync.dc: DataAsFlag(flag_per_store=False, fence_before_flag=False,
                        checksum_per_destination=True, marker_work_per_copy=True,
                        in_block_flag=False, verify_per_block=True, rearm_sentinel=False,
                        timeout_on_collision=False),
    # sentinel polling: the receiver polls the blocks themselves, pre-filled with a sentinel,
    # and re-arms them after use
    Sync.sp: DataAsFlag(flag_per_store=False, fence_before_flag=False,
                        checksum_per_destination=False, marker_work_per_copy=False,
                        in_block_flag=False, verify_per_block=True, rearm_sentinel=True,
                        timeout_on_collision=True),
}


def syncall(aivs: list, ready: int, cost: int, mark: int) -> None:
    """SyncAll: every AIV of the die waits, idle, until `cost` cycles after `ready` (when the
    last of them is ready), which ends its phase `mark`."""
    barrier = ready + cost
    for a in aivs:
        a.spend("sync", barrier - a.t, waiting=True)
        a.mark(mark)
