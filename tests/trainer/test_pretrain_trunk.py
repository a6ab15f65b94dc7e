"""The trunk pretraining recipe at tiny size, on the bundled corpus, and `worx trunk`."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.support.trainer import tiny_pretrain_config
from topology.commands import main as worx_main
from trainer.pretrain_card import CARD_NAME, REPORT_NAME
from trainer.pretrain_data import is_heldout, load_corpus
from trainer.recipes.pretrain_trunk import pretrain
from trainer.recipes.pretrain_trunk import schedule_lr as lr_at
from worx.bundled import corpus_dir as default_corpus_dir
from worx.bundled import trunk_dir as default_trunk_dir

DOMAINS = {"biomedical", "fiction_austen", "legal", "news", "python_code", "scripture", "tech_docs"}


@pytest.fixture(scope="module")
def trunk(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("pretrain") / "trunk"
    steps: list[tuple[int, float]] = []
    report = pretrain(tiny_pretrain_config(out), on_step=lambda s, loss: steps.append((s, loss)))
    assert [s for s, _ in steps] == list(range(1, 41))
    return out, report


@pytest.mark.slow
def test_loss_falls_and_trunk_loads_like_any_hf_model(trunk: tuple[Path, dict]) -> None:
    out, report = trunk
    assert report["steps"] == 40 and report["stopped_by"] == "steps"
    assert report["final_loss"] < report["initial_loss"] - 0.3
    for name in (
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        CARD_NAME,
        REPORT_NAME,
    ):
        assert (out / name).is_file(), name
    assert not list(out.glob("*.bin")), "weights must be safetensors only"

    tokenizer = AutoTokenizer.from_pretrained(out, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True, dtype=torch.float32)
    assert type(model).__name__ == "GPT2LMHeadModel"
    assert model.config.n_layer == 2 and model.config.n_embd == 32
    assert model.config.vocab_size == len(tokenizer) == report["vocab_size"]
    assert model.config.eos_token_id == tokenizer.eos_token_id
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()  # tied
    ids = tokenizer("It is a truth universally acknowledged", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=ids).logits  # (1, T, V)
    assert logits.shape == (1, ids.shape[1], len(tokenizer))
    assert torch.isfinite(logits).all()


@pytest.mark.slow
def test_card_reports_every_domain_and_the_reproducing_command(trunk: tuple[Path, dict]) -> None:
    out, report = trunk
    assert set(report["heldout"]) == DOMAINS
    assert {d for d, r in report["heldout"].items() if r["trained_on"]} == {
        "fiction_austen",
        "news",
    }
    for row in report["heldout"].values():
        assert row["tokens"] > 0 and row["ppl"] > 1.0
    card = (out / CARD_NAME).read_text()
    for domain in DOMAINS:
        assert f"| {domain} |" in card
    assert report["reproduce"] in card
    assert "--steps 40" in report["reproduce"] and "--seed 3" in report["reproduce"]
    assert f"{report['final_loss']:.3f}" in card


def test_same_seed_same_weights(tmp_path: Path) -> None:
    a = pretrain(tiny_pretrain_config(tmp_path / "a", steps=6))
    b = pretrain(tiny_pretrain_config(tmp_path / "b", steps=6))
    assert a["final_loss"] == b["final_loss"]
    wa = load_file(tmp_path / "a" / "model.safetensors")
    wb = load_file(tmp_path / "b" / "model.safetensors")
    assert wa.keys() == wb.keys()
    for name in wa:
        assert torch.equal(wa[name], wb[name]), name


def test_stop_step_and_small_limit_saves_float16(tmp_path: Path) -> None:
    report = pretrain(
        tiny_pretrain_config(tmp_path / "t", steps=20, stop_step=4, max_weight_bytes=1)
    )
    assert report["steps"] == 4 and report["planned_steps"] == 20
    assert report["stopped_by"] == "stop_step"
    assert "--stop-step 4" in report["reproduce"]
    assert report["save_dtype"] == "float16"
    weights = load_file(tmp_path / "t" / "model.safetensors")
    assert {t.dtype for t in weights.values()} == {torch.float16}


def test_time_budget_decays_over_time_and_records_the_step_count(tmp_path: Path) -> None:
    report = pretrain(tiny_pretrain_config(tmp_path / "t", steps=0, minutes=0.01, warmup_steps=2))
    assert report["schedule"] == "time" and report["stopped_by"] == "time budget"
    assert report["steps"] >= 1 and report["planned_steps"] == report["steps"]
    assert f"--steps {report['steps']} --minutes 0" in report["reproduce"]
    assert "not bit for bit" in (tmp_path / "t" / CARD_NAME).read_text()


def test_schedule_warms_up_then_decays_to_the_floor() -> None:
    cfg = tiny_pretrain_config(Path("unused"), steps=100, lr=1e-3, warmup_steps=10)
    assert lr_at(0, 100, cfg) == pytest.approx(1e-4)
    assert lr_at(9, 100, cfg) == pytest.approx(1e-3)
    assert lr_at(99, 100, cfg) == pytest.approx(1e-4, rel=0.01)
    assert lr_at(50, 100, cfg) < lr_at(20, 100, cfg)
    assert lr_at(50, 100, cfg, progress=1.0) == pytest.approx(1e-4)  # time-based position
    assert lr_at(50, 100, cfg, progress=0.0) == pytest.approx(1e-3)


@pytest.mark.slow
def test_refuses_to_clobber_a_directory(tmp_path: Path, trunk: tuple[Path, dict]) -> None:
    other = tmp_path / "notatrunk"
    other.mkdir()
    (other / "precious.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="does not look like a trunk"):
        pretrain(tiny_pretrain_config(other, force=True))
    assert (other / "precious.txt").read_text() == "keep me"
    with pytest.raises(FileExistsError, match="--force"):
        pretrain(tiny_pretrain_config(trunk[0]))


def test_bad_settings_and_bad_corpus_say_how_to_fix(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--steps N"):
        pretrain(tiny_pretrain_config(tmp_path / "t", steps=0, minutes=0))
    with pytest.raises(ValueError, match="not divisible"):
        pretrain(tiny_pretrain_config(tmp_path / "t", width=30, heads=4))
    with pytest.raises(ValueError, match="not in"):
        pretrain(tiny_pretrain_config(tmp_path / "t", train_domains=("klingon",)))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    with gzip.open(corpus / "bad.jsonl.gz", "wt") as handle:
        handle.write('{"id": "a", "text": "fine"}\nnot json\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl\.gz:2"):
        load_corpus(corpus, 0.05)
    assert not (tmp_path / "t").exists()


def test_heldout_split_is_stable_and_covers_every_domain() -> None:
    corpus = load_corpus(default_corpus_dir(), 0.05)
    assert set(corpus.heldout) == DOMAINS
    for domain in DOMAINS:
        n_held, n_train = len(corpus.heldout[domain]), len(corpus.train[domain])
        assert 0 < n_held < 0.1 * (n_held + n_train), domain
    assert is_heldout("news/ca04/0") == is_heldout("news/ca04/0")


@pytest.mark.slow
def test_worx_trunk_info(trunk: tuple[Path, dict], capsys: pytest.CaptureFixture) -> None:
    out, report = trunk
    assert worx_main(["trunk", "info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["layers"] == 2 and info["width"] == 32 and info["tokenizer"] is True
    assert info["parameters"] == report["parameters"]
    assert info["report"]["final_loss"] == report["final_loss"]
    assert worx_main(["trunk", "info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "gpt2, 2 layers, width 32" in text and "fiction_austen" in text
    assert worx_main(["trunk", "info", str(out / "missing")]) == 2
    assert f"trunk directory {out / 'missing'} does not exist" in capsys.readouterr().err


def test_worx_trunk_pretrain_cli(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "cli"
    argv = [
        "trunk",
        "pretrain",
        "--out",
        str(out),
        "--minutes",
        "0",
        "--steps",
        "3",
        "--layers",
        "1",
        "--width",
        "32",
        "--vocab-size",
        "300",
        "--context",
        "16",
        "--batch-size",
        "4",
        "--max-docs-per-domain",
        "5",
        "--eval-tokens",
        "64",
        "--threads",
        "1",
        "--no-progress",
    ]
    assert worx_main(argv) == 0
    assert "trunk written to" in capsys.readouterr().out
    assert worx_main(argv) == 2  # exists, no --force
    assert "--force" in capsys.readouterr().err
    assert worx_main([*argv, "--force"]) == 0


def test_bundled_default_trunk_is_small_and_loads() -> None:
    path = default_trunk_dir()
    assert path == Path(__file__).resolve().parents[2] / "data" / "trunk"
    weights = path / "model.safetensors"
    assert weights.is_file(), "the default trunk is committed in data/trunk"
    assert weights.stat().st_size <= 21 * 1024 * 1024
    assert (path / CARD_NAME).is_file()
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch.float32)
    assert model.config.vocab_size == len(tokenizer)
    report = json.loads((path / REPORT_NAME).read_text())
    assert report["heldout"]["fiction_austen"]["ppl"] < report["heldout"]["python_code"]["ppl"]
