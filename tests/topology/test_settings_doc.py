"""docs/settings.md is what the settings' own metadata generates, and every setting has help."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from topology.composition.settings_doc import REGENERATE, missing_help, settings_markdown
from topology.composition.worx_config import setting_variables
from worx.settings import setting

PAGE = Path(__file__).resolve().parents[2] / "docs" / "settings.md"


def test_every_setting_has_help_text():
    assert missing_help() == [], "give these settings help=... (worx/settings.py's setting())"


def test_docs_settings_md_is_what_the_code_generates():
    assert PAGE.read_text() == settings_markdown(), (
        f"docs/settings.md differs from the settings' metadata; regenerate it: {REGENERATE}"
    )


def test_the_page_has_a_row_for_every_setting():
    page = settings_markdown()
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    assert len(rows) == len(setting_variables())  # one row per setting, sub-table fields too
    assert "## [trainer.expert]" in page and "`WORX_TRAINER__EXPERT__<FIELD>`" in page
    assert '| `embedder` | `"tfidf"` | one of `tfidf`, `trunk`, `sentence` |' in page


@dataclasses.dataclass(frozen=True)
class _Inner:
    rank: int = 4  # a trailing comment is no help
    seed: int = setting(0, help="seed of the data order")


@dataclasses.dataclass(frozen=True)
class _Outer:
    inner: _Inner = setting(default_factory=_Inner, help="a sub-table")
    port: int = setting(80, help="   ")


def test_a_setting_without_help_is_named_sub_tables_too():
    assert missing_help(_Outer) == ["inner.rank", "port"]
