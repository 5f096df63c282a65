"""Routing: each token's top-k distinct experts, drawn from the die's own stream or read from a
trace."""

from __future__ import annotations

import itertools

from ..model.params import Config, Routing
from ..model.traces import trace_routing
from ..model.workload import config_batches, config_cdf
from .rng import ROUTING, stream, unit

MAX_REJECTS = 8   # redraws for a distinct expert before the exact fallback draw


def route_die(cfg: Config, die: int, cdf: list[float], batch: int) -> list[list[int]]:
    """The experts of each of the die's `batch` tokens: `topk` distinct draws per token."""
    key = stream(cfg.seed, cfg.workload_key, die, ROUTING)
    counter = 0
    weights = [cdf[0]] + [cdf[e] - cdf[e - 1] for e in range(1, len(cdf))] if cdf else []
    tokens = []
    for _ in range(batch):
        chosen: list[int] = []
        for _ in range(cfg.topk):
            expert = -1
            for _ in range(MAX_REJECTS):
                u = unit(key, counter)
                counter += 1
                if not cdf:
                    e = int(u * cfg.experts)
                else:
                    x = u * cdf[-1]
                    e = 0
                    while e < cfg.experts - 1 and not x < cdf[e]:
                        e += 1
                if e not in chosen:
                    expert = e
                    break
            if expert < 0:
                # Exact fallback: one draw over the experts not yet chosen, by weight.
                u = unit(key, counter)
                counter += 1
                free = [e for e in range(cfg.experts)
                        if e not in chosen and (not cdf or weights[e] > 0.0)]
                mass = 0.0
                for e in free:
                    mass += weights[e] if cdf else 1.0
                x = u * mass
                acc = 0.0
                expert = free[-1]
                for e in free:
                    acc += weights[e] if cdf else 1.0
                    if x < acc:
                        expert = e
                        break
            chosen.append(expert)
        tokens.append(chosen)
    return tokens


def route(cfg: Config) -> list[list[list[int]]]:
    """Every die's routing: [die][token][k] the expert of each token's k-th copy."""
    if cfg.routing is Routing.trace:
        experts, tokens = trace_routing(cfg.trace, cfg.ranks, cfg.batch, cfg.topk, cfg.experts)
        rows = [list(map(int, row)) for row in experts]
        first = [0, *itertools.accumulate(tokens.tolist())]
        return [rows[first[s]:first[s + 1]] for s in range(cfg.ranks)]
    cdf = list(config_cdf(cfg))
    return [route_die(cfg, s, cdf, batch) for s, batch in enumerate(config_batches(cfg))]
