"""Where the Flink job keeps its checkpoints and which one a restart restores.

Flink writes ``<dir>/<job id>/chk-<n>/_metadata``; a checkpoint is complete only once its
``_metadata`` exists (a newer ``chk-<n>`` may be half-written when the job is killed), so
only those are restored. Any Flink filesystem URI is accepted as the directory; the
newest checkpoint is looked up on local (``file://``) directories only: elsewhere pass
the path to restore explicitly.

Example
-------
>>> import tempfile, pathlib
>>> root = pathlib.Path(tempfile.mkdtemp())
>>> (root / "job1" / "chk-3").mkdir(parents=True)
>>> _ = (root / "job1" / "chk-3" / "_metadata").write_bytes(b"x")
>>> (root / "job1" / "chk-4").mkdir()  # being written: no _metadata yet
>>> latest_checkpoint(root.as_uri()) == (root / "job1" / "chk-3").as_uri()
True
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse


def as_uri(directory: str | Path) -> str:
    """A checkpoint directory as a URI: a plain path becomes ``file:///abs/path``."""
    text = str(directory)
    if "://" in text:
        return text
    return Path(text).resolve().as_uri()


def local_path(uri: str) -> Path | None:
    """The local directory of a ``file://`` URI; None for another filesystem."""
    parsed = urlparse(uri)
    return Path(parsed.path) if parsed.scheme == "file" else None


def latest_checkpoint(directory: str) -> str | None:
    """The newest completed checkpoint under ``directory`` (a URI), or None."""
    root = local_path(as_uri(directory))
    if root is None or not root.is_dir():
        return None
    done = [m.parent for m in root.glob("*/chk-*/_metadata") if m.is_file()]
    if not done:
        return None
    newest = max(done, key=lambda d: (d.stat().st_mtime, int(d.name.split("-")[1])))
    return newest.as_uri()
