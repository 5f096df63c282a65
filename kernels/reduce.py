"""Combine's receiving side (docs/model.md, "Combine"): each token's copies reduced into one at
its source die (CANN's LocalWindowCopy); after V1's status polls and SyncAll where the protocol
sends statuses (protocols.RETURN_STATUS), else each token as soon as its copies are visible."""

from . import rng
from .jit import njit, u
from .layout import (B_REDUCE, C_POLL, C_REDUCE_COPY, C_REDUCE_COPY_LAST, C_REDUCE_SPLIT,
                     C_REDUCE_TOKEN, C_REDUCE_TOKEN_LAST, C_RETURN_RESET, C_RETURN_VERIFY,
                     C_SYNCALL, C_TIMEOUT, P_SEED, P_TOPK, P_WKEY, VIS)
from .polls import close_step, die_ends, poll, seen, take
from .receive import poll_counts
from .sync import syncall


@njit(inline="always")
def reduce_tokens(p, cfirst, cores, stores, c, fx, chance, signalled, ordered):
    """Every die's reduction: each AIV its share of the die's tokens (bsp's split: a part of
    one token's hidden dimension, when c's reduce_split > 1), each token's topk copies read
    (copy_ref[cfirst[d] + t * topk + k]) once visible; each `signalled` copy's signal polled
    and checked first (fx: sync.Effects) and the sentinel re-armed after use, or, `ordered`
    (protocols.ORDERED), each copy taken once it is there. Returns (delivered, violations,
    collisions): copies taken for the first time from their die's bucket, copies read before
    they were visible, sentinel collisions."""
    t_core = cores.t
    sto, copy_ref = stores.sto, stores.copy_ref
    bstart, bfill = stores.bstart, stores.bfill
    R, A = t_core.shape
    K = p[P_TOPK]
    split = c[C_REDUCE_SPLIT]
    period = c[C_POLL]
    inv_period = 1.0 / period
    timeout = c[C_TIMEOUT]
    verify = fx.copy_verify * c[C_RETURN_VERIFY]
    rearm = fx.copy_rearm * c[C_RETURN_RESET]
    delivered = violations = collisions = 0
    for d in range(R):
        skey = rng.stream(p[P_SEED], p[P_WKEY], d, rng.DOMAIN_COMBINE_SENTINEL)
        b_lo, b_hi = bstart[d], bfill[d]
        B = (cfirst[d + 1] - cfirst[d]) // K   # the die's tokens
        for a in range(A):
            if split > 1:
                # V1's hidden split: AIV a takes part a mod split of token a / split
                t_lo = a // split
                t_hi = t_lo + 1 if a < B * split else t_lo
                last = a % split == split - 1
            else:
                t_lo = a * B // A
                t_hi = (a + 1) * B // A
                last = True
            each = (c[C_REDUCE_COPY_LAST] if last else c[C_REDUCE_COPY]) + rearm
            token = c[C_REDUCE_TOKEN_LAST] if last else c[C_REDUCE_TOKEN]
            t = t_core[d, a]
            polled = 0
            for tok in range(t_lo, t_hi):
                g0 = cfirst[d] + tok * K
                if signalled:
                    for k in range(K):
                        data_sid = copy_ref[u(g0 + k), 0]
                        sig = copy_ref[u(g0 + k), 1]
                        v, hit = seen(sto[u(data_sid), VIS] if sig == data_sid else
                                      sto[u(sig), VIS], skey, tok * K + k, chance, timeout)
                        collisions += hit
                        t2p = poll(t, v, period, inv_period)
                        polled += t2p - t
                        t = t2p + verify
                if ordered:
                    # the status came behind its copies on their queue: each is taken once
                    # it is there
                    for k in range(K):
                        v = sto[u(copy_ref[u(g0 + k), 0]), VIS]
                        if v > t:
                            polled += v - t
                            t = v
                for k in range(K):
                    data_sid = copy_ref[u(g0 + k), 0]
                    if t < sto[u(data_sid), VIS]:
                        violations += 1
                    delivered += take(sto, data_sid, b_lo, b_hi)
                t += K * each + token
            n = t_hi - t_lo
            close_step(d, a, t, polled, n * K * verify, B_REDUCE, n * (K * each + token), t_core,
                       cores.bucket, cores.wait, cores.marks, cores.nmarks)
    return delivered, violations, collisions


@njit(inline="always")
def reduce(p, cfirst, c, chance, fx, status_fx, cores, stores, m, G):
    """Every die's receivers in combine (m: protocols.Mechanisms): with statuses (CANN's V1)
    each AIV polls its share of the sources' statuses (G from each: protocols.per_dest;
    WaitDispatch, read out as status_fx says), then SyncAll, then the reduction; else the
    reduction, with its polls where copies are signalled. A die's receivers touch nothing of
    another's, so each step runs over every die before the next. Returns (delivered,
    violations, collisions, ends): ends[d] is when die d's last AIV is done."""
    t_core = cores.t
    R, A = t_core.shape
    if m.return_status:
        poll_counts(p, cores, stores, c, status_fx, 0.0, A, 0, G)
        for d in range(R):
            syncall(d, 0, c[C_SYNCALL], t_core, cores.bucket, cores.wait, cores.marks, cores.nmarks)
    delivered, violations, collisions = reduce_tokens(p, cfirst, cores, stores, c, fx, chance,
                                                      m.signalled_copies, m.ordered)
    return delivered, violations, collisions, die_ends(t_core)
