"""Moved to :mod:`worx.scenario` (beside the bundled data it reads); topology/loop/demo_run.py
still imports it from here."""

from worx.scenario import CorpusError, LabelledDoc, Scenario, read_corpus, safe_doc_id

__all__ = ["CorpusError", "LabelledDoc", "Scenario", "read_corpus", "safe_doc_id"]
