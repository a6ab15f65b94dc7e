"""Fixtures of the experts tests: the tiny trunks (tests/support/experts.py)."""

from tests.support.experts import gpt2_trunk, trunk, trunk_dirs  # noqa: F401 - fixtures
