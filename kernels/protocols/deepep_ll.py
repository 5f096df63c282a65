"""deepep_ll: DeepEP's low-latency kernels as its June 2025 table was measured (commit d8dd185,
`csrc/kernels/internode_ll.cu`, lines below): a put per copy, a count per expert behind its
copies on the expert's queue pair, fixed slots per (local expert, source); the combine's puts
with a flag per expert behind them, a grid sync, then each token reduced (docs/model.md,
"DeepEP's low-latency kernels"). Beside its mechanisms, the code it alone runs: the fixed slots'
receive (`pair_receive`), which kernels/receive.py calls where RECEIVE says RECEIVE_SLOTS."""

import numpy as np

from .. import rng
from ..jit import njit, u
from ..layout import (B_REORDER, BALANCED, C_COUNT_RESET, C_COUNT_VERIFY, C_LOCAL_COPY,
                      C_POLL, C_STATUS_POLL, C_TIMEOUT, P_SEED, P_WKEY, RECEIVE_SLOTS, SP,
                      THEN_ISSUED, THEN_NEXT, TOKEN_ORDER, VIS)
from ..polls import close_step, poll, seen, take

# The mechanisms it uses (kernels/protocols: what each means), each with its source line.
MECHANISMS = {
    "receive": RECEIVE_SLOTS,     # L143 slot = atomicAdd(expert's counter); L266-290 receive
    "counts_after": THEN_ISSUED,  # L164 finish counter += 1 per put; L217 count once all issued
    "per_expert": 1,              # L217-221 a count per (expert, rank); L440 a flag per expert
    "signalled_copies": 0,        # L266 the receiver spins on the count alone
    "ordered": 1,                 # L154 puts and L221 the count on the expert's QP, in order
    "sync": SP,                   # L221 count sent as -n-1, never 0; L266 spins while 0
    "token_preload": 1,           # L92-130 a token read and cast to FP8 once, copies sent after
    "deal": TOKEN_ORDER,          # L92 an SM per token (warp k sends its copy k)
    "header_bytes": 16,           # L71 an int4 before the payload: the source token's index
    "expert_cores": 3,            # L316-320 3 warp groups per SM on ceil(experts / 3) SMs
    "return_deal": BALANCED,      # L395-411 a warp group per (local expert, destination)
    "return_status": 1,           # L440 a flag per expert; L458 spin on every flag; L461 grid sync
    "status_after": THEN_NEXT,    # L440 the flag on the same QP as L425's puts, unfenced
    "hidden_split": 0,            # L466 an SM reduces whole tokens, its threads over hidden
}


@njit   # compiled apart: inlined, its loops grew the dispatch function and slowed the others'
def pair_receive(p, cores, stores, sched, c, fx, chance, ordered, G):
    """Fixed slots (layout.RECEIVE_SLOTS, DeepEP's receive): on every die, each AIV takes an
    equal contiguous share of the (local expert, source) pairs, pair q = e * ranks + s (DeepEP's
    responsible expert index); per pair it polls the source's count message (of G a die sends
    it: the pair's own where there is one per expert), reads it out and checks it as the
    variant asks (fx), then copies the pair's copies out of their slots, each
    taken once it is there where the count came behind them on their queue (`ordered`,
    protocols.ORDERED). Returns (delivered, violations, collisions), as reorder's."""
    t_core, bucket, wait = cores.t, cores.bucket, cores.wait
    marks, nmarks = cores.marks, cores.nmarks
    sto, copy_ref, count_signal = stores.sto, stores.copy_ref, stores.count_signal
    bstart, bfill = stores.bstart, stores.bfill
    ecnt, cfirst, xslot = sched.ecnt, sched.cfirst, sched.xslot
    R, A = t_core.shape
    EL = (ecnt.shape[0] - 1) // R
    P = EL * R
    period = c[C_POLL]
    inv_period = 1.0 / period
    timeout = c[C_TIMEOUT]
    after = c[C_STATUS_POLL] + fx.count_verify * c[C_COUNT_VERIFY] + \
        fx.count_rearm * c[C_COUNT_RESET]
    work = c[C_LOCAL_COPY]
    # each received copy's source: copy x of source s's lists lands at slot xslot[x]
    src_of = np.empty(cfirst[R], np.int32)
    for s in range(R):
        for x in range(cfirst[s], cfirst[s + 1]):
            src_of[u(xslot[u(x)])] = s
    pstart = np.empty(P + 1, np.int64)
    delivered = violations = collisions = 0
    for d in range(R):
        skey = rng.stream(p[P_SEED], p[P_WKEY], d, rng.DOMAIN_SENTINEL)
        b_lo, b_hi = bstart[d], bfill[d]
        # where each pair's copies start in receive order (an expert's, source by source)
        pstart[:] = 0
        for e in range(EL):
            for g in range(ecnt[d * EL + e], ecnt[d * EL + e + 1]):
                pstart[e * R + src_of[u(g)] + 1] += 1
        pstart[0] = ecnt[d * EL]
        for q in range(P):
            pstart[q + 1] += pstart[q]
        for a in range(A):
            t = t_core[d, a]
            polled = 0
            copied = 0
            for q in range(a * P // A, (a + 1) * P // A):
                s = q % R
                # its count: the source's message to d, or under PER_EXPERT expert q // R's
                signal = count_signal[u((d * R + s) * G + q // R % G)]
                v, hit = seen(sto[u(signal), VIS], skey, q, chance, timeout)
                collisions += hit
                t2p = poll(t, v, period, inv_period)
                polled += t2p - t
                t = t2p + after
                for g in range(pstart[q], pstart[q + 1]):
                    data_sid = copy_ref[u(g), 0]
                    v = sto[u(data_sid), VIS]
                    if ordered and v > t:
                        polled += v - t
                        t = v
                    if t < v:
                        violations += 1
                    delivered += take(sto, data_sid, b_lo, b_hi)
                    t += work
                copied += pstart[q + 1] - pstart[q]
            n_pairs = (a + 1) * P // A - a * P // A
            close_step(d, a, t, polled, n_pairs * after, B_REORDER, copied * work, t_core, bucket,
                       wait, marks, nmarks)
    return delivered, violations, collisions
