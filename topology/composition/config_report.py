"""The effective settings, one row each, with where each came from (`worx config show`).

A row's ``source`` is ``default``, ``file`` (``origin``: the path) or ``env`` (``origin``:
the variable). A text value that may be a secret (:func:`worx_config.is_secret`: a
secret-looking name, or any librdkafka setting) is ``***`` once it is set; an empty one
stays empty, so the report says whether it is set and never what it is.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import typing
from typing import Any

from topology.composition.worx_config import Sources, is_secret, load_config_with_sources

MASK = "***"


@dataclasses.dataclass(frozen=True)
class Row:
    section: str  # "" for the top level (data_dir), "trainer.expert" for a sub-table
    name: str  # the key within the section (a librdkafka key for a client table)
    value: Any  # as loaded, or MASK
    source: str  # "default", "file" or "env"
    origin: str | None  # the file's path or the variable's name

    @property
    def setting(self) -> str:
        return f"{self.section}.{self.name}" if self.section else self.name


def config_rows(
    path: str | os.PathLike[str] | None = None, env: typing.Mapping[str, str] | None = None
) -> tuple[str | None, list[Row]]:
    """The file read (None: none) and every setting's row, section by section."""
    config, sources = load_config_with_sources(path, env)
    return sources.file, list(_rows(config, "", sources))


def _rows(obj: Any, section: str, sources: Sources) -> typing.Iterator[Row]:
    """A section's own values first, then its sub-tables (so the text is valid TOML)."""
    hints = typing.get_type_hints(type(obj))
    later: list[typing.Iterator[Row]] = []
    for field in dataclasses.fields(obj):
        value, hint = getattr(obj, field.name), hints[field.name]
        dotted = f"{section}.{field.name}" if section else field.name
        if dataclasses.is_dataclass(hint):
            later.append(_rows(value, dotted, sources))
        elif isinstance(value, dict) and value:
            later.append(_client_rows(value, dotted, hint, sources))
        else:
            # a number is a count, never a secret (serve.chars_per_token ends in "token")
            secret = is_secret(dotted, hint) and hint not in (int, float, bool)
            shown = MASK if value and secret else value
            yield Row(section, field.name, shown, *sources.of(dotted))
    for rows in later:
        yield from rows


def _client_rows(values: dict, dotted: str, hint: Any, sources: Sources) -> typing.Iterator[Row]:
    """A table of librdkafka settings: a row per key, every value masked."""
    for key in sorted(values):
        shown = MASK if is_secret(f"{dotted}.{key}", hint) else values[key]
        yield Row(dotted, key, shown, *sources.of(f"{dotted}.{key}"))


def as_toml(value: Any) -> str:
    """A value as TOML writes it (strings, numbers, booleans, lists, empty tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, tuple | list):
        return "[" + ", ".join(as_toml(item) for item in value) + "]"
    if isinstance(value, dict):
        return (
            "{}"
            if not value
            else "{ "
            + ", ".join(f"{json.dumps(k)} = {as_toml(v)}" for k, v in value.items())
            + " }"
        )
    return json.dumps(value)


def render_text(file: str | None, rows: list[Row], chosen_by: str | None = None) -> str:
    """The rows as a TOML file, each value followed by its source as a comment."""
    named = f"{file} (named by {chosen_by})" if file and chosen_by else file or "none"
    lines = [f"# the effective settings; file: {named}"]
    section = None
    for row in rows:
        if row.section != section:
            section = row.section
            lines += ["", f"[{section}]"] if section else [""]
        key = row.name if row.name.isidentifier() else json.dumps(row.name)
        source = row.source if row.origin is None else f"{row.source} {row.origin}"
        lines.append(f"{key} = {as_toml(row.value)}  # {source}")
    return "\n".join(lines) + "\n"


def render_json(file: str | None, rows: list[Row], chosen_by: str | None = None) -> str:
    """``{"file", "file_named_by", "settings": [{setting, section, value, source, origin}]}``."""
    body = {
        "file": file,
        "file_named_by": chosen_by if file else None,
        "settings": [
            {
                "setting": row.setting,
                "section": row.section,
                "value": list(row.value) if isinstance(row.value, tuple) else row.value,
                "source": row.source,
                "origin": row.origin,
            }
            for row in rows
        ],
    }
    return json.dumps(body, indent=2, allow_nan=True)
