"""docs/settings.md, generated from the settings' own metadata (:mod:`worx.settings`).

``worx config docs > docs/settings.md`` writes it; tests/topology/test_settings_doc.py
fails when the file differs from :func:`settings_markdown` or a setting has no help.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from typing import Any

from topology.composition.config_report import as_toml
from topology.composition.worx_config import WorxConfig, variable_name
from worx.settings import describe

REGENERATE = "worx config docs > docs/settings.md"

_INTRO = f"""# Settings

Every setting of worx, generated from the code by `{REGENERATE}`
(do not edit by hand: tests/topology/test_settings_doc.py fails when this page and the code
disagree). Each setting's help, unit and range live in one place, its dataclass field
(`worx/settings.py`'s `setting()`); the checks are each section's `validate()`.

Where a value comes from, the last wins: the default below, then the file (`--config
PATH`, else `$WORX_CONFIG`, else `./worx.toml`), then the environment:
`WORX_<SECTION>__<FIELD>` (`WORX_TRAINER__MAX_STEPS=30`), `WORX_<SECTION>__<TABLE>__<FIELD>`
for a sub-table (`WORX_TRAINER__EXPERT__RANK=64`), `WORX_DATA_DIR` for the top level, and
`WORX_KAFKA_CLIENT__<NAME>` / `WORX_INGEST_SOURCE_CLIENT__<NAME>` for a librdkafka setting
(underscores become dots: `..._SASL_PASSWORD` sets `sasl.password`); a list from the
environment is comma-separated (`WORX_INGEST__SOURCE_TOPICS=a,b`). Some commands take a
flag for a setting (`--bootstrap-servers`, `--store`), which wins over all three. A
mistyped name in the file or the environment is refused in one line, with the nearest
valid name.

`worx config show` prints the effective settings, each with where it came from (`--json`
for a script); a text value whose name looks secret (password, secret, sasl, credential,
or ending in token or key) and every librdkafka setting shows as `***` once set.

The loader is hand-written (`topology/composition/worx_config.py`), not pydantic-settings:
it keeps its one-line errors, its did-you-mean for mistyped names and its masking of
secrets in every message. What pydantic-settings cannot do (2.16.3, checked 2 December
2026): with `env_prefix="WORX_"`, `env_nested_delimiter="__"` and `extra="forbid"`, a
mistyped `WORX_ROUTER__JOB_DOC=5` beside `WORX_ROUTER__JOB_DOCS=7` loads silently as
`job_docs=7`: its environment source looks up the names of known fields only, so a typo in
a variable is never seen; here it is refused, naming `WORX_ROUTER__JOB_DOCS`. Example
files: `configs/demo.toml` (the demo's settings) and `configs/company.toml` (a company's
cluster and trunk).
"""


def settings_markdown() -> str:
    """The whole page: the introduction, then one table per section."""
    parts = [_INTRO]
    hints = typing.get_type_hints(WorxConfig)
    top = [f for f in dataclasses.fields(WorxConfig) if not dataclasses.is_dataclass(hints[f.name])]
    parts.append(_table("Top level", "WORX_DATA_DIR", "outside any section", WorxConfig, top))
    for field in dataclasses.fields(WorxConfig):
        if dataclasses.is_dataclass(hints[field.name]):
            parts += _sections(hints[field.name], field.name, _help(field))
    return "\n".join(parts)


def _sections(cls: type, dotted: str, about: str) -> list[str]:
    hints = typing.get_type_hints(cls)
    own = [f for f in dataclasses.fields(cls) if not dataclasses.is_dataclass(hints[f.name])]
    variable = variable_name(dotted) + "__<FIELD>"
    parts = [_table(f"[{dotted}]", variable, about, cls, own)]
    for field in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[field.name]):
            parts += _sections(hints[field.name], f"{dotted}.{field.name}", _help(field))
    return parts


def _table(title: str, variable: str, about: str, cls: type, fields: list) -> str:
    lines = [f"## {title}", ""]
    if about:
        lines += [f"{about[0].upper()}{about[1:]}; in the environment `{variable}`.", ""]
    lines += ["| setting | default | unit, range | help |", "| --- | --- | --- | --- |"]
    for field in fields:
        meta = describe(field)
        limits = [meta.unit] if meta.unit else []
        if meta.choices:
            limits.append("one of " + ", ".join(f"`{c}`" for c in meta.choices))
        if meta.range:
            limits.append(meta.range)
        cells = [f"`{field.name}`", f"`{as_toml(_default(field))}`"]
        cells += [_text("; ".join(limits)), _text(meta.help)]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    return field.default_factory()


def _help(field: dataclasses.Field) -> str:
    meta = describe(field)
    return meta.help if meta else ""


def _text(text: str) -> str:
    """Prose for a table cell: a placeholder such as ``<data_dir>`` in code, not an HTML tag."""
    return re.sub(r"(<[\w.:-]+>(?:[\w/-]|\.(?=\w))*)", r"`\1`", text)


def missing_help(root: type = WorxConfig) -> list[str]:
    """The dotted name of every setting of ``root`` without help text (the test wants none)."""
    missing = []

    def walk(cls: type, where: str) -> None:
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            dotted = f"{where}.{field.name}" if where else field.name
            meta = describe(field)
            if meta is None or not meta.help.strip():
                missing.append(dotted)
            if dataclasses.is_dataclass(hints[field.name]):
                walk(hints[field.name], dotted)

    walk(root, "")
    return missing
