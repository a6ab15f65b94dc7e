"""Where every command finds the trunk and keeps its state: one resolution for all.

Each directory is, in this order: the command-line override, the configured setting,
a default under ``data_dir``. The store has one rule for every command (``worx trainer``
writes where ``worx serve``, ``worx monitor`` and ``worx experts`` read):

- trunk: ``--trunk``, ``experts.trunk_dir``; else the bundled trunk;
- expert store: ``--store``, ``experts.store_dir``, ``trainer.store_dir``; else
  ``<data_dir>/experts``;
- training jobs: ``--jobs-dir``, ``trainer.jobs_dir``; else ``<data_dir>/trainer/jobs``;
- monitor state: ``--state-dir``, ``monitor.state_dir``; else ``<data_dir>/monitor``;
- discover state: ``--snapshot``; else ``<data_dir>/discover/state.json``.

A command that only reads a directory never creates it: :func:`existing_dir` refuses a
missing one with a :class:`worx.errors.UserError` (one line, exit 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from worx.errors import UserError

if TYPE_CHECKING:
    from topology.composition.worx_config import WorxConfig

PathLike = str | Path | None


STORE_HINT = (
    "pass --store DIR of an existing expert store (`worx trainer` writes one), or set "
    "experts.store_dir / data_dir (WORX_EXPERTS__STORE_DIR, WORX_DATA_DIR)"
)
STATE_HINT = (
    "pass --state-dir DIR of a `worx monitor` state directory, or set monitor.state_dir / "
    "data_dir (WORX_MONITOR__STATE_DIR, WORX_DATA_DIR)"
)


def existing_dir(path: Path, what: str, hint: str) -> Path:
    """``path`` if it is a directory; else UserError ``<what> <path> does not exist`` (or
    is a file) with ``hint``. Creates nothing."""
    if not path.exists():
        raise UserError(f"{what} {path} does not exist", hint)
    if not path.is_dir():
        raise UserError(f"{what} {path} is a file, not a directory", hint)
    return path


def trunk_dir(config: WorxConfig, override: PathLike = None) -> Path:
    """The trunk's Hugging Face directory."""
    configured = override or config.experts.trunk_dir
    if configured:
        return Path(configured)
    from experts.default_trunk import default_trunk_dir

    return Path(default_trunk_dir())


def store_dir(config: WorxConfig, override: PathLike = None) -> Path:
    """The expert store's root, the same for the trainer, the server and the monitor."""
    return Path(
        override
        or config.experts.store_dir
        or config.trainer.store_dir
        or Path(config.data_dir) / "experts"
    )


def jobs_dir(config: WorxConfig, override: PathLike = None) -> Path:
    """The trainer's job checkpoints and outcomes (``<jobs>/<job_id>/``)."""
    return Path(override or config.trainer.jobs_dir or Path(config.data_dir) / "trainer" / "jobs")


def monitor_state_dir(config: WorxConfig, override: PathLike = None) -> Path:
    """The monitor's history, held-out sets and live state."""
    return Path(override or config.monitor.state_dir or Path(config.data_dir) / "monitor")


def discover_snapshot(config: WorxConfig, override: PathLike = None) -> Path:
    """The discover stage's snapshot (state, offsets, outbox)."""
    return Path(override or Path(config.data_dir) / "discover" / "state.json")
