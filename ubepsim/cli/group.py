"""The root group, `ubepsim`: each command's module adds its command to it as it is imported
(ubepsim.cli runs them)."""

from __future__ import annotations

import click

from ..version import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             no_args_is_help=True)
# the code's version (the one datasets record), not the install's metadata, which an editable
# install keeps from the day it was made
@click.version_option(version=__version__, prog_name="ubepsim")
def cli() -> None:
    """Cycle-approximate simulator of MoE expert-parallel dispatch and combine on superpods (BSP /
    UBEP), and of DeepEP's low-latency kernels on GPU clusters."""
