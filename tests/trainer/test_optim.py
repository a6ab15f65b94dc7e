import torch

from trainer.checkpoint import load_latest, save_checkpoint
from trainer.optim import (
    FlatOptimizer,
    flatten_state,
    make_optimizer,
    state_bytes,
    unflatten_state,
)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(128, 64), torch.nn.GELU(), torch.nn.Linear(64, 128))


def _step(model, optimizer, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(16, 128, generator=gen)
    optimizer.zero_grad()
    loss = ((model(x) - x) ** 2).mean()
    loss.backward()
    optimizer.step()
    return float(loss.detach())


def test_8bit_states_take_about_a_quarter_of_fp32_and_reach_the_same_loss():
    figures = {}
    for kind in ("adamw", "adamw8bit"):
        model = _model()
        optimizer = make_optimizer(model.parameters(), kind, lr=3e-3)
        losses = [_step(model, optimizer, s % 4) for s in range(60)]
        params = sum(p.numel() for p in model.parameters())
        figures[kind] = (state_bytes(optimizer) / params, losses[-1])
    assert figures["adamw"][0] >= 8.0
    assert figures["adamw8bit"][0] < 2.3  # 2 bytes of moments + block scales + quantisation maps
    assert figures["adamw8bit"][1] < 0.5 * 1.0  # it learned
    assert abs(figures["adamw8bit"][1] - figures["adamw"][1]) < 0.05 * figures["adamw"][1] + 1e-3


def test_optimizer_state_round_trips_through_safetensors_and_json(tmp_path):
    for kind in ("adamw", "adamw8bit"):
        model = _model()
        optimizer = make_optimizer(model.parameters(), kind, lr=1e-2)
        for s in range(3):
            _step(model, optimizer, s)
        save_checkpoint(
            tmp_path / kind,
            3,
            dict(model.state_dict()),
            optimizer.state_dict(),
            {"epoch": 0, "cursor": 0},
            {"note": kind},
        )
        for s in range(3, 6):
            _step(model, optimizer, s)
        expected = {k: v.clone() for k, v in model.state_dict().items()}

        ckpt = load_latest(tmp_path / kind)
        assert ckpt is not None and ckpt.step == 3 and ckpt.extra == {"note": kind}
        resumed = _model()
        resumed.load_state_dict(ckpt.weights)
        optimizer = make_optimizer(resumed.parameters(), kind, lr=1e-2)
        optimizer.load_state_dict(ckpt.optimizer)
        for s in range(3, 6):
            _step(resumed, optimizer, s)
        for name, tensor in resumed.state_dict().items():
            assert torch.equal(tensor, expected[name]), (kind, name)
    # nothing in a checkpoint is a pickle
    assert not list(tmp_path.rglob("*.pt")) and not list(tmp_path.rglob("*.bin"))


def test_flatten_keeps_tuples_ints_and_nested_keys():
    state = {
        "state": {0: {"step": torch.tensor(3.0), "m": torch.ones(2)}},
        "param_groups": [{"betas": (0.9, 0.99), "params": [0]}],
    }
    tensors: dict = {}
    skeleton = flatten_state(state, tensors)
    back = unflatten_state(skeleton, tensors)
    assert back["param_groups"][0]["betas"] == (0.9, 0.99)
    assert torch.equal(back["state"][0]["m"], torch.ones(2))
    assert 0 in back["state"]


def test_flat_optimizer_in_place_and_host_offloaded_match_the_plain_optimizer():
    for kind in ("adamw", "adamw8bit"):
        plain_model, flat_model, offload_model = _model(), _model(), _model()
        plain = make_optimizer(plain_model.parameters(), kind, lr=1e-2)
        flat = FlatOptimizer(flat_model.parameters(), kind, lr=1e-2)
        offloaded = FlatOptimizer(offload_model.parameters(), kind, lr=1e-2, host_offload=True)
        for s in range(5):
            _step(plain_model, plain, s)
            _step(flat_model, flat, s)
            _step(offload_model, offloaded, s)
        tolerance = 1e-6 if kind == "adamw" else 2e-3  # 8-bit blocks fall differently when flat
        for a, b, c in zip(
            plain_model.parameters(),
            flat_model.parameters(),
            offload_model.parameters(),
            strict=True,
        ):
            assert torch.allclose(a, b, atol=tolerance)
            assert torch.equal(b, c)  # offloaded or in place: the same arithmetic
        # the parameters are views of the flat master buffer: one optimizer tensor
        assert len(flat.inner.param_groups[0]["params"]) == 1
        assert state_bytes(flat) <= state_bytes(plain)
