"""Retention of ended jobs' directories under the trainer's jobs dir.

A job directory whose ``outcome.json`` exists has ended (its checkpoints are already
cleared); what remains is what makes a replayed job ``skipped``. The newest ``keep`` ended
jobs are kept, and none older than ``max_age_s`` (0: no limit). A job replayed after its
directory went is trained again unless its expert is stored (then it is announced again,
a no-op downstream). A directory without ``outcome.json`` (a job running or interrupted)
is never touched.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

log = logging.getLogger(__name__)

OUTCOME = "outcome.json"


def prune_ended_jobs(
    jobs_dir: Path, keep: int, max_age_s: float, now: float | None = None
) -> list[str]:
    """Remove ended job directories beyond the newest ``keep`` or older than ``max_age_s``."""
    if not jobs_dir.is_dir():
        return []
    now = time.time() if now is None else now
    ended = []
    for entry in jobs_dir.iterdir():
        try:
            ended.append((entry.joinpath(OUTCOME).stat().st_mtime, entry))
        except OSError:
            continue  # not a job directory, or one that has not ended
    ended.sort(key=lambda pair: (pair[0], pair[1].name), reverse=True)  # newest first
    removed = []
    for index, (ended_at, entry) in enumerate(ended):
        if (keep > 0 and index >= keep) or (max_age_s > 0 and now - ended_at > max_age_s):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
    if removed:
        log.info("removed %d ended job directories from %s", len(removed), jobs_dir)
    return removed
