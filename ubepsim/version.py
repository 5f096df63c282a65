"""The version of ubepsim: written here alone (pyproject.toml reads it), recorded by every file
ubepsim writes."""

__version__ = "0.13.0"
