"""The installed version, read from the package metadata: pyproject.toml is the one place it is written."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    __version__ = version("ragaudit")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
