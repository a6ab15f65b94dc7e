"""The Examples in the ingest modules' docstrings run."""

from __future__ import annotations

import doctest

import pytest

import ingest.normalise
import ingest.stage


@pytest.mark.parametrize("module", [ingest.normalise, ingest.stage])
def test_docstring_examples_run(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
