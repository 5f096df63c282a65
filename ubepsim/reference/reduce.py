"""Combine's receiving side: each token's copies reduced into one at its source die (CANN's
LocalWindowCopy), under bsp after V1's status polls and SyncAll, under ubep each token as soon as
its copies are visible (docs/model.md, "Combine")."""

from __future__ import annotations

from .polls import poll, seen
from .receive import poll_counts
from .state import Die, Run, share
from .sync import DataAsFlag, syncall


def reduce(run: Run, dies: list[Die], s: int, returned: dict, status: DataAsFlag) -> None:
    """Die s's receivers. bsp (CANN's V1): every AIV polls the statuses of its share of the
    sources (WaitDispatch, read out as `status` says), then SyncAll, then reduce_tokens. ubep:
    reduce_tokens, every AIV after its own sends (returned[i]: copy i's store and the store
    signalling it)."""
    die = dies[s]
    if run.mech.return_status:
        poll_counts(run, dies, s, die.cores, "status_poll", status, 0.0, 0)
        syncall(die.cores, max(a.t for a in die.cores), run.c["syncall"])
    reduce_tokens(run, die, s, returned)


def reduce_tokens(run: Run, die: Die, s: int, returned: dict) -> None:
    """Die s's reduction: each AIV its share of the die's tokens (bsp's split: a part of one
    token's hidden dimension, when reduce_split > 1), each token's copies read once visible;
    each signalled copy's signal polled and checked first (run.copy_sync) and the sentinel
    re-armed after use, or, ordered (DeepEP), each copy taken once it is there."""
    c, cfg = run.c, run.cfg
    K, A = cfg.topk, run.cores
    B = len(returned) // K   # the die's tokens
    policy = run.copy_sync
    split = c["reduce_split"]
    for j, a in enumerate(die.cores):
        if split > 1:
            # V1's hidden split: AIV j takes part j mod split of token j / split
            tokens = range(j // split, j // split + 1) if j < B * split else range(0)
            last = j % split == split - 1
        else:
            tokens, last = share(j, A, B), True
        suffix = "_last" if last else ""
        for t in tokens:
            copies = [returned[t * K + k] for k in range(K)]
            if run.mech.signalled_copies:
                for k, (_, sig) in enumerate(copies):
                    poll(a, seen(run, die, sig, t * K + k, run.q_return, policy), c["poll"],
                         "sync")
                    if policy.verify_per_block:
                        a.spend("sync", c["return_verify"])
            if run.mech.ordered:
                # the status came behind the copies on their queue: each taken once there
                for data, _ in copies:
                    a.spend("sync", max(0, data.visible - a.t), waiting=True)
            die.reduced.append((t, a.t))
            for k, (data, _) in enumerate(copies):
                if a.t < data.visible:
                    die.violations += 1
                die.take((t, k), data, s)
            # each copy's read, dequantization (int8), Cast, Muls and Add (and sp's re-arming),
            # then the token's Duplicate, Cast back and store
            a.spend("reduce", K * (c["reduce_copy" + suffix]
                                   + (c["return_reset"] if policy.rearm_sentinel else 0))
                    + c["reduce_token" + suffix])
        a.mark("reduce")
