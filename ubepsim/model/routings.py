"""The routing generators, one registry: each is a function from what the workload draws per
expert to every expert's share of the routing weight (its popularity).

A generator's signature says what it reads. Its arguments named in INPUTS are drawn per
(seed, workload) by `workload.expert_cdf`; every other argument is a parameter of the model,
declared in `params.PARAMS` and read only where `routing` names this generator (params.GATED
is built from these signatures). A new distribution is its function here, its parameters in
params.PARAMS, and its docs and tests. `uniform` draws each expert alike (no weights);
`trace` reads the routing from a file (traces.read_trace): neither is a generator here.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import numpy as np

# What the workload draws per expert, for a generator to read:
# - rank: its place in the popularity order (0 the most popular), a permutation drawn per
#   (seed, workload) over the whole layout;
# - die_rank: its place when the dies come in a drawn order and each die's experts together:
#   the most popular experts are all the experts of the first dies;
# - normal: a standard normal draw.
INPUTS = ("rank", "die_rank", "normal")


def zipf(rank, zipf_s):
    """The r-th most popular expert has weight 1 / (r + 1)^zipf_s."""
    return 1.0 / (rank + 1.0) ** zipf_s


def hot(rank, die_rank, hot_experts, hot_share, hot_placement):
    """The `hot_experts` most popular share `hot_share` of the weight evenly, the others the
    rest. hot_placement `spread` draws them over the layout (Megatron's W1 and W3); `ranks`
    puts them on whole dies, a die's experts together (W2: the hot rank)."""
    order = die_rank if hot_placement == "ranks" else rank
    cold = rank.shape[0] - hot_experts
    return np.where(order < hot_experts, hot_share / hot_experts,
                    (1.0 - hot_share) / cold if cold else 0.0)


def lognormal(normal, lognormal_sigma):
    """Each expert's weight exp(sigma * z), z standard normal: the log-normal loads that fit
    DeepSeek-V3's routing traces best (DeepEP PR 393)."""
    return np.exp(lognormal_sigma * normal)


# name -> (the kernel's code, the generator); codes are kernels/layout.py's and never change
# (uniform 0 and trace 3 are not generators)
GENERATORS: dict[str, tuple[int, Callable[..., np.ndarray]]] = {
    "zipf": (1, zipf),
    "hot": (2, hot),
    "lognormal": (4, lognormal),
}
# Zero load (Megatron-LM PR 7488's W5), on top of uniform routing and every generator: the
# `zero_ranks` last dies of the drawn die order (their experts) and a `zero_experts` share of the
# experts, those of least weight (on a tie the later in the popularity order), get no tokens.
ZERO_LOAD = ("zero_experts", "zero_ranks")


def zero_count(share, experts):
    """How many experts a `zero_experts` share leaves without load (scalars or arrays)."""
    return np.floor(np.asarray(share) * np.asarray(experts) + 0.5).astype(np.int64)


def zeroed(weights, rank, die_rank, ranks, zero_experts, zero_ranks):
    """Which experts get no load: the `zero_experts` share of least weight (on a tie, the later
    in the popularity order `rank`), and those of the last `zero_ranks` dies of the die order."""
    experts = rank.shape[0]
    out = die_rank >= (ranks - zero_ranks) * (experts // ranks)
    out[np.lexsort((-rank, weights))[:zero_count(zero_experts, experts)]] = True
    return out


# every routing by its code (a Parquet enum's index is its code)
CODES = dict(sorted({"uniform": 0, "trace": 3, **{name: code for name, (code, _) in
                                                   GENERATORS.items()}}.items(),
                    key=lambda item: item[1]))


@functools.cache
def _arguments(name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A generator's arguments, split: (its INPUTS, its model parameters)."""
    args = tuple(inspect.signature(GENERATORS[name][1]).parameters)
    return tuple(a for a in args if a in INPUTS), tuple(a for a in args if a not in INPUTS)


def inputs(name: str) -> tuple[str, ...]:
    """What a generator reads of the workload's draws (INPUTS)."""
    return _arguments(name)[0]


def parameters(name: str) -> tuple[str, ...]:
    """The model parameters a generator reads: its arguments that are not INPUTS."""
    return _arguments(name)[1]


@functools.cache
def reads(name: str) -> tuple[str, ...]:
    """The parameters a routing's weights read: its generator's, and zero load's unless it is
    a trace (which carries its own loads)."""
    return (parameters(name) if name in GENERATORS else ()) + \
        (ZERO_LOAD if name != "trace" else ())


def readers() -> dict[str, tuple[str, ...]]:
    """Each generator parameter, and the generators that read it."""
    out: dict[str, list[str]] = {}
    for name in GENERATORS:
        for p in parameters(name):
            out.setdefault(p, []).append(name)
    return {p: tuple(names) for p, names in out.items()}


def weights(name: str, drawn: dict[str, np.ndarray], values: dict) -> np.ndarray:
    """Every expert's weight under generator `name`, from the workload's draws and the
    parameters' values (enums by name)."""
    return np.asarray(GENERATORS[name][1](**{p: drawn[p] for p in inputs(name)},
                                          **{p: values[p] for p in parameters(name)}),
                      dtype=np.float64)
