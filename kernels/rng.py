"""Counter-based random numbers: splitmix64 keyed by (seed, workload, die, domain, counter).

No state is carried between draws, so a draw depends only on its key: results never depend on
threads, chunking or machine.
"""

import numpy as np

from .jit import njit

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
M1 = np.uint64(0xBF58476D1CE4E5B9)
M2 = np.uint64(0x94D049BB133111EB)
S30, S27, S31, S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
TWO_M53 = 1.0 / 9007199254740992.0

# Domains keep the streams of different uses apart.
DOMAIN_ROUTING = 0
DOMAIN_SENTINEL = 1
DOMAIN_POPULARITY = 2
DOMAIN_COMBINE_SENTINEL = 3   # combine's receivers: the draws of its returned copies
DOMAIN_LAUNCH = 4             # a die's launch offset (programs.launch_starts)


@njit
def mix64(x):
    z = x + GOLDEN
    z = (z ^ (z >> S30)) * M1
    z = (z ^ (z >> S27)) * M2
    return z ^ (z >> S31)


@njit
def stream(seed, workload_key, die, domain):
    """The key of one die's stream in one domain."""
    h = mix64(np.uint64(seed))
    h = mix64(h ^ np.uint64(workload_key))
    h = mix64(h ^ np.uint64(die))
    return mix64(h ^ np.uint64(domain))


@njit
def unit(key, counter):
    """Draw number `counter` of stream `key`, uniform in [0, 1) with 53 bits."""
    return float(mix64(key ^ (np.uint64(counter) * GOLDEN)) >> S11) * TWO_M53
