"""The evaluation history on disk: every matrix row of every run, one JSON file, atomic.

Layout of ``<root>/history.json``::

    {"version": 1,
     "runs": {"ours": [EvalRow dict, ...], "dense_baseline": [...]},
     "digests": {"ours": {domain_id: held-out digest the column was computed on}},
     "detail": {"ours": {domain_id: {doc_id: {"loss": float, "routing": {expert: w}}}}},
     "experts": {expert_id: {"domain_id", "centroid", "sha256", "created_ms"}},
     "tensor_hashes": {"trunk/<name>" | "expert/<id>/<name>": sha256},
     "verified": {"step", "experts", "problems", "at_ms"}}

``detail`` keeps only the latest step's per-document losses and routing (what the next
step compares against). ``tensor_hashes`` are the hashes first seen for every tensor; any
later difference is weight forgetting. ``verified`` is the latest check of every expert
at the end of a run (:meth:`monitor.evaluator.Evaluator.verify_all`).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import math
import threading
from pathlib import Path
from typing import Any

from monitor.metrics import summarise
from monitor.records import EvalRow
from worx.atomic import atomic_write_bytes

log = logging.getLogger(__name__)

RUNS = ("ours", "dense_baseline")


class MatrixHistory:
    """Thread-safe, restart-safe store of the evaluation matrices."""

    VERSION = 1

    def __init__(self, root: str | Path) -> None:
        self.path = Path(root) / "history.json"
        self._lock = threading.RLock()
        self.data: dict[str, Any] = {
            "version": self.VERSION,
            "runs": {run: [] for run in RUNS},
            "digests": {run: {} for run in RUNS},
            "detail": {run: {} for run in RUNS},
            "experts": {},
            "tensor_hashes": {},
            "verified": {},
        }
        # each row dict's EvalRow, parsed (and checked) once: rows() is called at every step
        self._parsed: dict[int, tuple[dict, EvalRow]] = {}
        if self.path.exists():
            body = json.loads(self.path.read_text())
            if body.get("version") != self.VERSION:
                raise ValueError(
                    f"{self.path} has version {body.get('version')!r}, this build reads "
                    f"{self.VERSION}; move it away to start a new history"
                )
            for key, value in body.items():
                if isinstance(value, dict) and isinstance(self.data.get(key), dict):
                    self.data[key].update(value)
            for run in RUNS:
                self.rows(run)  # refuse a corrupt history loudly, at start

    def save(self) -> None:
        """Write the whole history (atomic). Compact JSON: the file grows with steps x
        domains and is written at every step, and json's C encoder cannot indent."""
        with self._lock:
            body = json.dumps(self.data, sort_keys=True, separators=(",", ":"))
            atomic_write_bytes(self.path, body.encode())

    # --- rows -------------------------------------------------------------------------
    def rows(self, run: str = "ours") -> list[EvalRow]:
        """The run's rows (shared, frozen objects: copy a field before changing it)."""
        with self._lock:
            raw = self.data["runs"][run]
            out = []
            for body in raw:
                hit = self._parsed.get(id(body))
                if hit is None or hit[0] is not body:
                    hit = (body, EvalRow.from_dict(body))
                    self._parsed[id(body)] = hit
                out.append(hit[1])
            if len(self._parsed) > 2 * sum(len(r) for r in self.data["runs"].values()) + 64:
                held = {id(b) for r in self.data["runs"].values() for b in r}
                self._parsed = {k: v for k, v in self._parsed.items() if k in held}
            return out

    def _put(self, row: EvalRow, body: dict) -> dict:
        self._parsed[id(body)] = (body, row)
        return body

    def append(self, row: EvalRow, save: bool = True) -> None:
        """Add the next row of ``row.run`` (its step must be the next one) and save."""
        with self._lock:
            rows = self.data["runs"][row.run]
            if row.step != len(rows):
                raise ValueError(f"{row.run}: step {row.step} given, the next step is {len(rows)}")
            rows.append(self._put(row, row.to_dict()))
            if save:
                self.save()

    def replace(self, row: EvalRow) -> None:
        """Overwrite an existing row (a back-filled or re-evaluated column)."""
        with self._lock:
            self.data["runs"][row.run][row.step] = self._put(row, row.to_dict())

    def patch(self, row: EvalRow, *fields: str) -> None:
        """:meth:`replace` for a row that differs from the stored one only in ``fields``
        (finite numbers): those are copied in, nothing else is converted again."""
        with self._lock:
            raw = self.data["runs"][row.run]
            body = {**raw[row.step], **{f: copy.deepcopy(getattr(row, f)) for f in fields}}
            raw[row.step] = self._put(row, body)

    def set_summaries(self, run: str, summaries: list[dict]) -> None:
        """Give row ``i`` of ``run`` the metric summary ``summaries[i]`` (finite numbers and
        None only, as :func:`monitor.metrics.summarise` makes them)."""
        with self._lock:
            raw, rows = self.data["runs"][run], self.rows(run)
            if len(summaries) != len(raw):
                raise ValueError(f"{len(summaries)} summaries for {len(raw)} rows of {run}")
            for i, (row, summary) in enumerate(zip(rows, summaries, strict=True)):
                new = dataclasses.replace(row, summary=summary)
                raw[i] = self._put(new, {**raw[i], "summary": summary})

    def reset_run(self, run: str) -> None:
        with self._lock:
            self.data["runs"][run] = []
            self.data["digests"][run] = {}
            self.data["detail"][run] = {}

    # --- the matrix -------------------------------------------------------------------
    def domains(self, run: str = "ours") -> list[str]:
        """Columns: domains in the order their experts arrived, then the others sorted."""
        with self._lock:
            rows = self.data["runs"][run]
            arrived = [r["arrived_domain"] for r in rows if r.get("arrived_domain")]
            order = list(dict.fromkeys(arrived))
            rest = sorted({d for r in rows for d in r["loss"]} - set(order))
        return order + rest

    def matrix(self, run: str = "ours", domains: list[str] | None = None) -> dict[str, Any]:
        """``{"domains", "loss" (rows x domains, None = missing), "arrivals", "experts"}``."""
        with self._lock:
            rows = self.data["runs"][run]
            domains = domains or self.domains(run)
            loss = [[r["loss"].get(d) for d in domains] for r in rows]
            arrivals: list[int | None] = []
            for d in domains:
                steps = [r["step"] for r in rows if r.get("arrived_domain") == d]
                arrivals.append(min(steps) if steps else None)
            return {
                "domains": domains,
                "loss": loss,
                "arrivals": arrivals,
                "experts": [r.get("arrived_expert") for r in rows],
            }

    def summaries(self, run: str = "ours") -> list[dict]:
        m = self.matrix(run)
        if not m["loss"]:
            return []
        return [summarise(m["loss"], m["arrivals"], i) for i in range(len(m["loss"]))]


def perplexity(loss: float) -> float:
    """``exp(loss)``, capped to stay JSON-finite for absurd losses."""
    return math.exp(min(loss, 700.0))
