"""Where the tests' files are, for test modules in any of the folders under ``tests/``."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
"""``tests/``: the shared fixtures, notebooks, the Slurm testbed, the browser tests' artifacts."""
ROOT = TESTS.parent
"""The repository's root."""
