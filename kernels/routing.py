"""Routing: each die's tokens, each sent to top-k distinct experts (the MoE gate's choice).

Drawn from the counter-based generator keyed by (seed, workload, die), so a die's routing does
not depend on threads or on the other dies; or read from a trace.
"""

import numpy as np

from . import rng
from .jit import njit
from .layout import (EQUAL_BATCHES, P_BATCH, P_BATCHES, P_EXPERTS, P_RANKS, P_ROUTING, P_SEED,
                     P_TOPK, P_WKEY, TRACE)

MAX_REJECTS = 8   # redraws for a distinct expert before the exact fallback draw


@njit
def route_die(out, key, batch, topk, experts, cdf, chosen):
    """Fill out[batch * topk] with each token's distinct experts (see reference.route_die):
    a draw by popularity (cdf: cumulative weights, empty for uniform), redrawn while it repeats
    an expert of the token, then one exact draw over the experts left."""
    counter = 0
    weighted = cdf.shape[0] > 0
    for t in range(batch):
        for k in range(topk):
            expert = -1
            for _ in range(MAX_REJECTS):
                u = rng.unit(key, counter)
                counter += 1
                if not weighted:
                    e = int(u * experts)
                else:
                    x = u * cdf[experts - 1]
                    lo, hi = 0, experts - 1   # first e with x < cdf[e], at most experts - 1
                    while lo < hi:
                        mid = (lo + hi) // 2
                        if x < cdf[mid]:
                            hi = mid
                        else:
                            lo = mid + 1
                    e = lo
                dup = False
                for k2 in range(k):
                    if chosen[k2] == e:
                        dup = True
                        break
                if not dup:
                    expert = e
                    break
            if expert < 0:
                u = rng.unit(key, counter)
                counter += 1
                mass = 0.0
                last = -1
                for e in range(experts):
                    if _free(e, chosen, k, cdf, weighted):
                        mass += _weight(e, cdf, weighted)
                        last = e
                x = u * mass
                acc = 0.0
                expert = last
                for e in range(experts):
                    if _free(e, chosen, k, cdf, weighted):
                        acc += _weight(e, cdf, weighted)
                        if x < acc:
                            expert = e
                            break
            chosen[k] = expert
            out[t * topk + k] = expert


@njit(inline="always")
def _weight(e, cdf, weighted):
    if not weighted:
        return 1.0
    return cdf[0] if e == 0 else cdf[e] - cdf[e - 1]


@njit(inline="always")
def _free(e, chosen, k, cdf, weighted):
    for k2 in range(k):
        if chosen[k2] == e:
            return False
    return (not weighted) or _weight(e, cdf, weighted) > 0.0


@njit
def copy_starts(p, batches):
    """Where each die's token copies start, [ranks + 1] (cfirst[ranks]: every copy): die s
    holds P_BATCH tokens, or batches[P_BATCHES + s] (layout.EQUAL_BATCHES), topk copies
    each. Every stage indexes a die's copies by these, in die order."""
    R, B, K = p[P_RANKS], p[P_BATCH], p[P_TOPK]
    cfirst = np.empty(R + 1, np.int64)
    cfirst[0] = 0
    at = p[P_BATCHES]
    for s in range(R):
        cfirst[s + 1] = cfirst[s] + (B if at == EQUAL_BATCHES else batches[at + s]) * K
    return cfirst


@njit(inline="always")
def most_copies(cfirst):
    """The most token copies one die holds (cfirst: copy_starts)."""
    most = 0
    for s in range(cfirst.shape[0] - 1):
        most = max(most, cfirst[s + 1] - cfirst[s])
    return most


@njit
def route(p, cdf, trace, cfirst):
    """Every die's experts, [cfirst[ranks]]: die s's tokens from cfirst[s] (copy_starts),
    each token's top-k in a row."""
    R, K, E = p[P_RANKS], p[P_TOPK], p[P_EXPERTS]
    experts_of = np.empty(cfirst[R], np.int32)
    if p[P_ROUTING] == TRACE:
        for g in range(cfirst[R]):    # (not a slice assignment: see results.put_marks)
            experts_of[g] = trace[g]
    else:
        chosen = np.empty(K, np.int64)
        for s in range(R):
            key = rng.stream(p[P_SEED], p[P_WKEY], s, rng.DOMAIN_ROUTING)
            route_die(experts_of[cfirst[s]:cfirst[s + 1]], key, (cfirst[s + 1] - cfirst[s]) // K,
                      K, E, cdf, chosen)
    return experts_of
