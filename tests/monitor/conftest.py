"""Fixtures of the monitor tests: one small real run shared by the read-only tests
(tests/support/smallrun.py)."""

from tests.support.smallrun import run_copy, small_run  # noqa: F401 - fixtures
