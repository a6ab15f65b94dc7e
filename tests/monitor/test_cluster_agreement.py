"""NMI and purity of discovered domains against labels (monitor/cluster_agreement.py)."""

from __future__ import annotations

import math

import pytest

from monitor.cluster_agreement import nmi_purity, nmi_purity_of_counts


def test_clusters_that_are_the_labels_renamed_agree_fully() -> None:
    assert nmi_purity(["a", "a", "b", "c"], ["x", "x", "y", "z"]) == (1.0, 1.0)


def test_clusters_independent_of_the_labels_share_no_information() -> None:
    nmi, purity = nmi_purity_of_counts({("a", "x"): 5, ("a", "y"): 5, ("b", "x"): 5, ("b", "y"): 5})
    assert nmi == pytest.approx(0.0, abs=1e-12) and purity == 0.5


def test_one_cluster_split_in_two_by_hand() -> None:
    # a: 2 docs, both in x; b: 2 docs, one in x, one in y
    labels, clusters = ["a", "a", "b", "b"], ["x", "x", "x", "y"]
    h_lab = math.log(2)
    h_clu = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    mi = 0.5 * math.log(0.5 / (0.5 * 0.75)) + 0.25 * math.log(0.25 / (0.5 * 0.75))
    mi += 0.25 * math.log(0.25 / (0.5 * 0.25))
    nmi, purity = nmi_purity(labels, clusters)
    assert nmi == pytest.approx(2 * mi / (h_lab + h_clu)) and purity == 0.75
    assert nmi_purity_of_counts({("a", "x"): 2, ("b", "x"): 1, ("b", "y"): 1}) == (nmi, purity)


def test_no_documents_is_refused() -> None:
    with pytest.raises(ValueError, match="no documents"):
        nmi_purity_of_counts({})
