"""`python -m ubepsim`: the `ubepsim` command."""

from .cli import entry

entry()
