"""The counter-based generator (splitmix64), written again as in kernels/rng.py: a stream per
(seed, configuration, die, domain), a uniform draw per counter, so that no result depends on
the order in which anything is computed."""

from __future__ import annotations

MASK = (1 << 64) - 1

# Domains of the streams: a die's routing draws, its receivers' sentinel collisions in dispatch
# and in combine, its launch offset (kernels/rng.py DOMAIN_*; 2 is the popularity table's).
ROUTING, SENTINEL, COMBINE_SENTINEL, LAUNCH = 0, 1, 3, 4


def mix64(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def stream(seed: int, workload_key: int, die: int, domain: int) -> int:
    h = mix64(seed & MASK)
    h = mix64(h ^ workload_key)
    h = mix64(h ^ die)
    return mix64(h ^ domain)


def unit(key: int, counter: int) -> float:
    return (mix64(key ^ ((counter * 0x9E3779B97F4A7C15) & MASK)) >> 11) * (1.0 / (1 << 53))
