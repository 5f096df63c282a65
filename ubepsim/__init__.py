"""ubepsim: a cycle-approximate simulator of MoE expert-parallel dispatch on superpods."""

from .errors import InputError
from .sweep.params import Config, make_config
from .sweep.profile import Profile, load_profile
from .version import __version__

__all__ = ["Config", "InputError", "Profile", "__version__", "die_frame", "load_profile",
           "make_config", "simulate", "simulate_many"]


def simulate(config, profile=None, timeline=False):
    """Simulate one configuration; see ubepsim.sweep.model.simulate."""
    from .sweep.model import simulate as _simulate
    return _simulate(config, profile, timeline=timeline)


def simulate_many(configs, profile=None, threads=None):
    """Simulate many configurations in parallel; see ubepsim.sweep.model.simulate_many."""
    from .sweep.model import simulate_many as _simulate_many
    return _simulate_many(configs, profile, threads)


def die_frame(config, profile=None):
    """One configuration die by die (tokens, copies sent and taken, finish); see
    ubepsim.sweep.model.die_frame."""
    from .sweep.model import die_frame as _die_frame
    return _die_frame(config, profile)
