"""The ``overlord`` command line."""

from overlord.cli.main import main

__all__ = ["main"]
