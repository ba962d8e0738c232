"""The one source of the package version (pyproject.toml reads it too)."""

__version__ = "0.2.0"
