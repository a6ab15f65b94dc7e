"""The planner's bytes against the tensors a real trunk, expert and optimizer allocate."""

from __future__ import annotations

import json

import pytest
import torch

from experts.expert import Expert
from experts.trunk import load_trunk
from trainer.config import TrainerConfig
from trainer.expert_setup import expert_config_for
from trainer.optim import FlatOptimizer, state_bytes
from trainer.plan import ExpertSpec, Hardware, RunShape, TrunkShape, parse_bytes, plan_training
from trainer.plan.bytes import dense_step, optimizer_state_bytes
from trainer.plan.shapes import NAMED
from worx.bundled import trunk_dir as bundled_dir


def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


@pytest.fixture(scope="module")
def bundled():
    return load_trunk(bundled_dir())  # the 5.3M-parameter default trunk, float32


def test_trunk_bytes_are_the_loaded_models(bundled) -> None:
    from transformers import AutoModelForCausalLM, LlamaConfig

    shape = TrunkShape.named("bundled")  # GPT-2, tied embeddings
    assert shape.params * 4 == _bytes(bundled.model.parameters())  # tied: counted once
    assert shape.param_tensors == len(list(bundled.model.parameters()))
    config = LlamaConfig(  # untied, grouped-query attention
        vocab_size=300,
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
    )
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    llama = TrunkShape.from_config(config.to_dict())
    assert llama.params * 2 == _bytes(model.parameters())
    assert llama.param_tensors == len(list(model.parameters()))


def test_named_shapes_match_the_hf_modules() -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    assert TrunkShape.named("llama-7b").params == pytest.approx(6.74e9, rel=1e-3)
    assert TrunkShape.named("llama-13b").params == pytest.approx(13.0e9, rel=2e-3)
    assert TrunkShape.named("gpt2").params == 124_439_808
    assert TrunkShape.named("gpt2-xl").params == pytest.approx(1.558e9, rel=1e-3)
    for name, fields in NAMED.items():
        config = AutoConfig.for_model(**fields)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        params = list(model.parameters())
        shape = TrunkShape.named(name)
        assert shape.params == sum(p.numel() for p in params), name
        assert shape.param_tensors == len(params), name


def test_expert_weights_grads_and_optimizer_states_are_the_trainers(bundled) -> None:
    shape = TrunkShape.named("bundled")
    config = TrainerConfig()
    spec = ExpertSpec.from_trainer_config(shape, config)
    expert = Expert(expert_config_for(bundled, config), bundled.hidden_size)
    assert spec.config == expert.config
    assert spec.params * 4 == _bytes(expert.parameters())
    run = RunShape(micro_batch=2, seq_len=16)
    from trainer.plan.bytes import expert_step

    planned = expert_step(shape, spec, run, act_bytes=4)
    for kind in ("adamw8bit", "adamw"):
        trained = Expert.branch(expert)
        optimizer = FlatOptimizer(trained.parameters(), kind, lr=1e-3)
        loss = sum((p.float() ** 2).sum() for p in trained.parameters())
        loss.backward()
        assert planned.grads == _bytes(p.grad for p in trained.parameters())
        optimizer.step()
        assert state_bytes(optimizer) == optimizer_state_bytes(kind, spec.params, 1), kind
    assert planned.optimizer == optimizer_state_bytes(config.optimizer, spec.params, 1)


def test_dense_states_are_torch_adamws(bundled) -> None:
    shape = TrunkShape.named("bundled")
    model = bundled.model
    params = [p for p in model.parameters()]
    for p in params:
        p.requires_grad_(True)
    try:
        optimizer = torch.optim.AdamW(params, lr=1e-4)
        for p in params:
            p.grad = torch.zeros_like(p)
        optimizer.step()
        planned = dense_step(shape, RunShape(), act_bytes=4, on_gpu=False)
        assert planned.optimizer == state_bytes(optimizer)
        assert planned.grads == _bytes(p.grad for p in params)
        assert planned.weights == _bytes(params)
    finally:
        for p in params:
            p.grad = None
            p.requires_grad_(False)


def test_saved_activations_are_what_autograd_keeps() -> None:
    """The dense per-block saved bytes of a Llama, against saved_tensors_hooks."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=172,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=4,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    own = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in own:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    ids = torch.randint(0, 256, (2, 32))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model.model(input_ids=ids, use_cache=False)
    shape = TrunkShape.from_config(config.to_dict())
    planned = dense_step(shape, RunShape(micro_batch=2, seq_len=32), act_bytes=4, on_gpu=False)
    assert planned.saved == pytest.approx(sum(seen.values()), rel=0.03)


def test_a_plan_that_cannot_fit_says_why() -> None:
    trunk = TrunkShape.named("llama-7b")
    expert = ExpertSpec.sized(trunk, "adapter", 150_000_000)
    plan = plan_training(
        trunk,
        expert,
        RunShape(trunk_dtype="bfloat16"),
        Hardware(gpus=0, host_bytes=parse_bytes("24GiB"), disk_bytes=parse_bytes("1TB")),
    )
    assert not plan.dense.fits
    assert "host memory" in plan.dense.reason and "24.0 GiB" in plan.dense.reason
    assert "nothing fits" in plan.summary
    assert plan.expert.fits  # the expert on the same machine does
    tight = plan_training(
        trunk, expert, RunShape(trunk_dtype="bfloat16"), Hardware(gpus=0, host_bytes=2**30)
    )
    assert not tight.expert.fits and "host memory" in tight.expert.reason
    body = json.loads(tight.to_json())
    assert body["expert"]["fits"] is False and body["expert"]["reason"]


def test_placements_choose_the_first_that_fits() -> None:
    trunk = TrunkShape.named("llama-7b")
    expert = ExpertSpec.sized(trunk, "adapter", 150_000_000)
    run = RunShape(trunk_dtype="bfloat16")
    roomy = plan_training(trunk, expert, run, Hardware(gpus=0, host_bytes=parse_bytes("64GiB")))
    small = plan_training(trunk, expert, run, Hardware(gpus=0, host_bytes=parse_bytes("12GiB")))
    assert roomy.expert.name == "expert_cpu_mmap"
    assert small.expert.name == "expert_cpu_streamed"
    assert small.expert.peak_host_bytes < 12 * 2**30 < roomy.expert.peak_host_bytes
    one, two = (
        plan_training(trunk, expert, run, Hardware(gpus=gpus, host_bytes=parse_bytes("64GiB")))
        for gpus in (1, 2)
    )
    assert one.expert.name == two.expert.name == "expert_gpu"
    assert one.expert.peak_gpu_bytes == two.expert.peak_gpu_bytes < 80 * 2**30  # a job per GPU
    assert two.expert.tokens_per_s == pytest.approx(2 * one.expert.tokens_per_s)
    assert one.dense.name == "dense_gpu_offload_nvme" and two.dense.name == "dense_gpu_zero3"


def test_cli_json_and_bad_arguments(capsys) -> None:
    from topology.commands import main

    code = main(
        [
            "plan",
            "--trunk",
            "llama-7b",
            "--rank",
            "1144",
            "--expert-kind",
            "adapter",
            "--gpus",
            "1",
            "--gpu-mem",
            "80GiB",
            "--host-mem",
            "64GiB",
            "--disk",
            "1TB",
            "--json",
        ]
    )
    assert code == 0
    body = json.loads(capsys.readouterr().out)
    assert body["expert"]["fits"] is True
    assert body["expert_spec"]["params"] == pytest.approx(150e6, rel=1e-3)
    assert body["trunk"]["params"] == TrunkShape.named("llama-7b").params
    assert {c["where"] for c in body["expert"]["components"]} <= {"gpu", "host", "disk"}
    for argv in (
        ["--gpu-mem", "lots"],
        ["--micro-batch", "0"],
        ["--trunk", "no-such-shape"],
        ["--expert-kind", "giant"],
    ):
        assert main(["plan", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("worx plan: ") and err.count("\n") == 1, err
