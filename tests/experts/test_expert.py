"""The expert module: zero-initialised output projection, branching, config validation."""

from __future__ import annotations

import pytest
import torch

from experts.expert import Expert, ExpertConfig, ExpertConfigError
from tests.support.experts import randomize


def test_untrained_adapter_outputs_exact_zero_and_counts_params() -> None:
    expert = Expert(
        ExpertConfig(kind="adapter", layers=(0, 2), rank=4, activation="silu"), hidden_size=16
    )
    x = torch.randn(3, 5, 16)
    for layer in (0, 2):
        assert torch.equal(expert.adapter(layer)(x), torch.zeros(3, 5, 16))
    per_layer = 16 * 4 + 4 + 4 * 16 + 16
    assert expert.num_params() == 2 * per_layer
    assert sorted(expert.adapters.keys()) == ["0", "2"]


def test_branch_copies_and_never_modifies_the_source() -> None:
    source = randomize(
        Expert(ExpertConfig(kind="adapter", layers=(1,), rank=3), hidden_size=8), seed=1
    )
    before = {k: v.clone() for k, v in source.state_dict().items()}
    branch = Expert.branch(source)
    assert all(torch.equal(branch.state_dict()[k], v) for k, v in before.items())
    opt = torch.optim.SGD(branch.parameters(), lr=0.1)
    branch.adapter(1)(torch.randn(2, 4, 8)).pow(2).sum().backward()
    opt.step()
    assert any(not torch.equal(branch.state_dict()[k], v) for k, v in before.items())
    assert all(torch.equal(source.state_dict()[k], v) for k, v in before.items())


def test_config_round_trip_and_validation() -> None:
    config = ExpertConfig(kind="adapter", layers=(0, 1), rank=8, activation="relu")
    assert ExpertConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ExpertConfigError, match="activation"):
        ExpertConfig(kind="adapter", layers=(0,), rank=2, activation="swishy")
    with pytest.raises(ExpertConfigError, match="rank"):
        ExpertConfig(kind="adapter", layers=(0,), rank=0)
    with pytest.raises(ExpertConfigError, match="distinct"):
        ExpertConfig(kind="adapter", layers=(1, 1), rank=2)
    with pytest.raises(ExpertConfigError, match="do not exist"):
        ExpertConfig(kind="adapter", layers=(0, 5), rank=2).validate(num_layers=2)
    with pytest.raises(ExpertConfigError, match="layers"):
        ExpertConfig.from_dict({"layers": "0", "rank": 2})


def test_from_tensors_checks_names_and_shapes() -> None:
    expert = randomize(
        Expert(ExpertConfig(kind="adapter", layers=(0,), rank=2), hidden_size=8), seed=2
    )
    rebuilt = Expert.from_tensors(expert.config, 8, expert.tensors())
    x = torch.randn(1, 3, 8)
    assert torch.equal(rebuilt.adapter(0)(x), expert.adapter(0)(x))
    with pytest.raises(ExpertConfigError, match="wrong shape"):
        Expert.from_tensors(ExpertConfig(kind="adapter", layers=(0,), rank=3), 8, expert.tensors())


def test_module_examples_run() -> None:
    import doctest

    import experts.expert
    import router.gate

    for module in (experts.expert, router.gate):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
