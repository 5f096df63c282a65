"""ubepsim: a cycle-approximate simulator of MoE expert-parallel dispatch on superpods."""

from .errors import InputError
from .model.params import Config, make_config
from .model.profile import Profile, load_profile
from .version import __version__

__all__ = ["Config", "InputError", "Profile", "__version__", "die_frame", "load_profile",
           "make_config", "simulate", "simulate_many"]


def simulate(config, profile=None, timeline=False):
    """Simulate one configuration; see ubepsim.model.api.simulate."""
    from .model.api import simulate as _simulate
    return _simulate(config, profile, timeline=timeline)


def simulate_many(configs, profile=None, threads=None):
    """Simulate many configurations in parallel; see ubepsim.model.api.simulate_many."""
    from .model.api import simulate_many as _simulate_many
    return _simulate_many(configs, profile, threads)


def die_frame(config, profile=None):
    """One configuration die by die (tokens, copies sent and taken, finish); see
    ubepsim.model.api.die_frame."""
    from .model.api import die_frame as _die_frame
    return _die_frame(config, profile)
