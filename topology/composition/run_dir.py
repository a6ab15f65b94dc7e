"""A run directory: what `worx demo` (one run) and `worx up` (its data_dir) leave behind,
and how the read-only commands open it with no broker.

```
<run>/run.json       where the run's parts are: trunk, expert store, monitor state
<run>/domains.json   the domain table, as on <prefix>.domains (router/table_file.py)
<run>/experts/       the expert store (unless configured elsewhere: run.json says where)
<run>/monitor/       the monitor's history (dashboard, report)
```

``worx serve --run``, ``worx explain --run`` and ``worx domains --run`` read these and
create nothing: a missing directory or file is a :class:`RunError` (one line, exit 2).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from router.table_file import FILE as DOMAINS_FILE
from router.table_file import TableFileError
from worx.atomic import atomic_write_json
from worx.errors import UserError

if TYPE_CHECKING:
    from topology.composition.worx_config import WorxConfig

log = logging.getLogger(__name__)

RUN_FILE = "run.json"
SCHEMA_VERSION = 1


class RunError(UserError):
    """A run directory (or a part of it) that is missing or unusable."""


@dataclass(frozen=True)
class RunDir:
    root: Path
    trunk_dir: Path | None  # None: the run did not record it (use --trunk or the config)
    store_dir: Path
    monitor_dir: Path

    @property
    def domains_file(self) -> Path:
        return self.root / DOMAINS_FILE


def write_run_file(root: Path, trunk_dir: Path, store_dir: Path, monitor_dir: Path) -> None:
    """Record where the run's parts are (absolute paths), atomically."""
    atomic_write_json(
        Path(root) / RUN_FILE,
        {
            "schema_version": SCHEMA_VERSION,
            "trunk_dir": str(Path(trunk_dir).resolve()),
            "store_dir": str(Path(store_dir).resolve()),
            "monitor_dir": str(Path(monitor_dir).resolve()),
        },
    )


def open_run(path: str | Path) -> RunDir:
    """The run at ``path``; reads only (``run.json`` if there, else the default layout).

    Raises:
        RunError: no such directory, an unreadable ``run.json``, or no domain table.
    """
    root = Path(path)
    if not root.is_dir():
        what = "no such directory" if not root.exists() else "not a directory"
        raise RunError(
            f"no run at {root} ({what})",
            "pass the run directory `worx demo` printed (e.g. worx-demo/run-...), or data_dir",
        )
    recorded = _read_run_file(root / RUN_FILE)
    trunk = recorded.get("trunk_dir")
    run = RunDir(
        root=root,
        trunk_dir=Path(trunk) if trunk else None,
        store_dir=Path(recorded.get("store_dir") or root / "experts"),
        monitor_dir=Path(recorded.get("monitor_dir") or root / "monitor"),
    )
    if not run.domains_file.exists():
        copy = run.monitor_dir / DOMAINS_FILE  # the monitor's own copy, in the same format
        hint = (
            f"copy the monitor's copy into the run: cp {copy} {run.domains_file}"
            if copy.is_file()
            else "re-run `worx demo`, or follow a live cluster with --bootstrap-servers"
        )
        raise RunError(
            f"{root} has no domain table ({DOMAINS_FILE}): not a run directory, or a run from "
            "before runs kept their table",
            hint,
        )
    return run


def load_domains(run: RunDir, dim: int | None = None) -> Any:
    """The run's :class:`router.table.DomainTable`.

    Raises:
        RunError: the table file is corrupt or holds a row the table refuses.
    """
    from router.table_file import load_table

    try:
        return load_table(run.domains_file, dim)
    except TableFileError as exc:
        copy = run.monitor_dir / DOMAINS_FILE  # the monitor's own copy, in the same format
        hint = f"copy {copy} over it" if copy.is_file() else "re-run `worx demo`"
        raise RunError(str(exc), hint) from None


def _read_run_file(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise RunError(f"{path} is not readable JSON ({exc})", "") from None
    if not isinstance(body, dict) or not all(
        isinstance(body.get(k, ""), str) for k in ("trunk_dir", "store_dir", "monitor_dir")
    ):
        raise RunError(f"{path} is not a run description (trunk_dir, store_dir, monitor_dir)")
    return body


def run_server(
    config: WorxConfig, run: RunDir, trunk_dir: str | None = None, store_dir: str | None = None
):
    """An :class:`experts.serving.ExpertServer` on the run's trunk, store and domain table
    (``trunk_dir`` / ``store_dir`` override the run's own); follows no topic.

    A run that stored no expert yet is served by the trunk alone (its store is not made).

    Raises:
        RunError: the trunk is not where the run (or the override) says.
        UserError: a ``store_dir`` override that does not exist.
    """
    from topology.composition.assemble import server_from_config

    trunk = Path(trunk_dir) if trunk_dir else run.trunk_dir
    if trunk is None:
        trunk = Path(config.experts.trunk_dir) if config.experts.trunk_dir else None
    if trunk is not None and not (trunk / "config.json").is_file():
        what = "does not exist" if not trunk.exists() else "is not a model directory"
        where = "given" if trunk_dir else f"recorded in {run.root / RUN_FILE}"
        raise RunError(f"the trunk {trunk} ({where}) {what}", "pass --trunk DIR")
    store = Path(store_dir) if store_dir else run.store_dir
    if not store_dir and not store.is_dir():  # no expert stored yet: the trunk serves alone
        log.warning("the run has no expert store yet (%s): the trunk serves every text", store)
        experts = dataclasses.replace(config.experts, store_dir=str(store))
        config, store_dir = dataclasses.replace(config, experts=experts), None
    else:
        store_dir = str(store)  # an override that does not exist is refused (and not made)
    server = server_from_config(config, str(trunk) if trunk else None, store_dir)
    server.rebuild_from_store()
    server.domains = load_domains(run, getattr(server.embedder, "dim", None))
    return server
