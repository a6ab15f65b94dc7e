"""`worx demo --trainers N`: the trainer processes the loop starts (orchestrate's
trainer_children) and the demo command's parsing of it and of --stream. No process is
started: the specs and the plan are what is checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from topology.commands import main
from topology.loop import demo_run
from topology.loop.orchestrate import LoopOptions, trainer_children
from topology.loop.supervisor import worx_argv


def options(tmp_path: Path, **fields) -> LoopOptions:
    return LoopOptions("127.0.0.1:9", run_dir=tmp_path / "run", trunk_dir=tmp_path, **fields)


def test_one_trainer_is_the_loop_s_trainer_as_before(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    (spec,) = trainer_children(options(tmp_path, trainer_env={"WORX_TRAINER__MAX_STEPS": "5"}), 8)
    assert spec.name == "trainer" and spec.argv == worx_argv("trainer", "--no-progress")
    assert spec.env == {"WORX_TRAINER__MAX_STEPS": "5"}  # no thread count imposed


def test_n_trainers_are_named_apart_share_the_cores_and_keep_their_jobs_apart(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    specs = trainer_children(options(tmp_path, trainers=3), cores=8)
    assert [s.name for s in specs] == ["trainer", "trainer-2", "trainer-3"]  # one log each
    assert all(s.argv == worx_argv("trainer", "--no-progress") for s in specs)
    assert [s.env["OMP_NUM_THREADS"] for s in specs] == ["2", "2", "2"]  # 8 // 3
    jobs = [s.env.get("WORX_TRAINER__JOBS_DIR") for s in specs]
    run = tmp_path / "run"
    assert jobs == [None, str(run / "trainer-2" / "jobs"), str(run / "trainer-3" / "jobs")]
    assert trainer_children(options(tmp_path, trainers=2), cores=2)[1].env["OMP_NUM_THREADS"] == "1"
    assert trainer_children(options(tmp_path, trainers=4), cores=2)[0].env["OMP_NUM_THREADS"] == "1"


def test_a_thread_count_set_by_the_user_wins(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    specs = trainer_children(options(tmp_path, trainers=2), cores=8)
    assert all("OMP_NUM_THREADS" not in s.env for s in specs)  # inherited as the user set it
    monkeypatch.delenv("OMP_NUM_THREADS")
    mine = options(tmp_path, trainers=2, stage_env={"OMP_NUM_THREADS": "4"})
    assert all("OMP_NUM_THREADS" not in s.env for s in trainer_children(mine, cores=8))


def test_no_trainer_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="trainers must be >= 1"):
        trainer_children(options(tmp_path, trainers=0), cores=2)


@pytest.fixture
def planned(monkeypatch, tmp_path):
    """The plan `worx demo ARGS` hands run_demo, without running it."""
    monkeypatch.chdir(tmp_path)
    plans = []

    def capture(plan, console=None, on_stopped=None):
        plans.append(plan)
        return {"finished": True, "keep_serving": False, "run_dir": "r", "explore_command": ""}

    monkeypatch.setattr(demo_run, "run_demo", capture)
    return plans


def test_demo_hands_its_plan_the_trainers_and_the_stream(planned) -> None:
    assert main(["demo", "--out", "runs", "--trainers", "2", "--stream", "mixed"]) == 0
    assert main(["demo", "--out", "runs", "--stream", "company", "--docs", "50"]) == 0
    assert main(["demo", "--out", "runs"]) == 0
    assert [(p.trainers, p.stream, p.docs) for p in planned] == [
        (2, "mixed", None),
        (1, "mixed", 50),  # company: the mixed stream's older name
        (1, "phased", None),
    ]


def test_demo_refuses_no_trainer_and_an_unknown_stream(planned, capsys) -> None:
    assert main(["demo", "--out", "runs", "--trainers", "0"]) == 2
    assert capsys.readouterr().err == "worx: --trainers 0; pass --trainers N with N >= 1\n"
    with pytest.raises(SystemExit):
        main(["demo", "--out", "runs", "--stream", "shuffled"])  # argparse's choices
    assert planned == []


def test_stream_names_read_the_alias_as_the_stream() -> None:
    assert demo_run.stream_name("company") == demo_run.stream_name("mixed") == "mixed"
    assert demo_run.stream_name("phased") == "phased"


def test_demo_paces_its_feed_unless_told_not_to(planned, capsys) -> None:
    from topology.commands.demo import DEMO_RATE

    assert main(["demo", "--out", "runs"]) == 0
    assert main(["demo", "--out", "runs", "--rate", "0"]) == 0
    assert main(["demo", "--out", "runs", "--rate", "25"]) == 0
    assert [p.rate for p in planned] == [DEMO_RATE or None, None, 25.0]
    assert main(["demo", "--out", "runs", "--rate", "-1"]) == 2
    assert "pass --rate R with R >= 0" in capsys.readouterr().err
    paced = demo_run.feed_spec(Path("s.jsonl"), 25.0).argv
    assert paced[paced.index("--rate") + 1] == "25.0"
    assert "--rate" not in demo_run.feed_spec(Path("s.jsonl")).argv


def test_a_corpus_of_its_own_plans_its_domains(planned, tmp_path) -> None:
    import gzip
    import json

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("news", "zeta_kind", "alpha_kind"):
        with gzip.open(corpus / f"{name}.jsonl.gz", "wt") as f:
            f.write(json.dumps({"id": f"{name}-1", "text": f"a document of {name}"}) + "\n")
    assert main(["demo", "--out", "runs", "--corpus", str(corpus)]) == 0
    assert (
        main(["demo", "--out", "runs", "--corpus", str(corpus), "--new-domains", "zeta_kind"]) == 0
    )
    first, chosen = planned
    assert first.old_domains == ("news",)  # the trunk's own domains the corpus has
    assert first.new_domains == ("alpha_kind", "zeta_kind")
    assert chosen.new_domains == ("zeta_kind",)
