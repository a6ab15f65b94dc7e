"""Prometheus series are keyed by domain id and carry the domain's name, escaped."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor.figures import build_state
from monitor.prom import make_registry
from tests.support.histories import history_with_gaps


def test_names_label_the_series_and_are_escaped(tmp_path: Path) -> None:
    names = {"a": 'court "rulings" \\ appeals', "b": "self·def·import"}  # "c": no name
    live = {"jobs": {"j1": {"domain_id": "b", "state": "step", "step": 1, "total_steps": 4,
                            "updated_ms": 5}}}  # fmt: skip
    state = build_state(history_with_gaps(tmp_path), live, labels=names)
    text = generate_latest(make_registry(lambda: state)).decode()
    assert 'name="court \\"rulings\\" \\\\ appeals"' in text  # quotes and backslash escaped
    parsed = {
        (s.name, s.labels.get("run"), s.labels["domain"]): s.labels["name"]
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if "domain" in s.labels
    }
    assert parsed[("worx_domain_perplexity", "ours", "a")] == names["a"]  # read back intact
    assert parsed[("worx_domain_info", None, "b")] == "self·def·import"
    assert parsed[("worx_domain_loss", "ours", "c")] == "c"  # no name: the id
    assert parsed[("worx_train_progress", None, "b")] == "self·def·import"
