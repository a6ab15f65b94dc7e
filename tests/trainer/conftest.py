"""Fixtures of the trainer tests: the tiny trunk (tests/support/trainer.py)."""

from tests.support.trainer import trunk, trunk_dir  # noqa: F401 - fixtures
