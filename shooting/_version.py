"""The package version, defined once in pyproject.toml and read from the installed metadata."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["VERSION"]

try:
    VERSION: str = version("shooting")
except PackageNotFoundError:  # run from a source tree that was never installed
    VERSION = "0+unknown"
