"""One place for what a setting means: :func:`setting` puts its help text, unit and range
or choices into the dataclass field's metadata, where `worx config show` and the generated
docs/settings.md (`worx config docs`) read them.

Example
-------
>>> import dataclasses
>>> @dataclasses.dataclass(frozen=True)
... class Demo:
...     port: int = setting(8080, help="HTTP port", range="0..65535")
>>> describe(dataclasses.fields(Demo)[0])
Setting(help='HTTP port', unit='', range='0..65535', choices=())
>>> Demo().port
8080
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

_MISSING: Any = dataclasses.MISSING


@dataclasses.dataclass(frozen=True)
class Setting:
    """What a setting means: its help text, unit (``s``, ``docs``...) and range or choices."""

    help: str
    unit: str = ""
    range: str = ""
    choices: tuple[str, ...] = ()


def setting(
    default: Any = _MISSING,
    *,
    help: str,
    unit: str = "",
    range: str = "",
    choices: Sequence[str] = (),
    default_factory: Callable[[], Any] = _MISSING,
) -> Any:
    """A dataclass field whose metadata holds its :class:`Setting` (the default unchanged)."""
    meta = Setting(help=help, unit=unit, range=range, choices=tuple(choices))
    return dataclasses.field(
        default=default, default_factory=default_factory, metadata={"setting": meta}
    )


def describe(field: dataclasses.Field) -> Setting | None:
    """The :class:`Setting` of a field made by :func:`setting`; None for any other field."""
    return field.metadata.get("setting")
