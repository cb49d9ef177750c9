"""The command line: `transduce VERB ...` (main.py), one module per group of verbs."""

from .main import main

__all__ = ["main"]
