"""A reversible GPT-2-style causal LM (``model_type`` ``"worx_reversible"``), loaded natively.

Each block keeps two residual streams and couples them with its attention ``F`` and its MLP
``G`` (RevNet, Reformer)::

    y1 = x1 + F(x2)        F(x) = attn(ln_1(x))
    y2 = x2 + G(y1)        G(x) = mlp(ln_2(x))

so the inputs follow from the outputs: ``x2 = y2 - G(y1)``, ``x1 = y1 - F(x2)``. When the
blocks' own weights train, :class:`_ReversibleStack` (a ``torch.autograd.Function``) runs the
stack without recording a graph, saves only its two output streams, and in backward walks
the blocks top-down, reconstructing each block's inputs and recomputing that one block
under autograd: the activations held do not grow with depth. Otherwise (a frozen trunk, as
under the experts; inference) the blocks run under plain autograd, so activation
checkpointing and the mixture's hooks work as on a GPT-2 trunk.

The layout is GPT-2's where the experts meet it: ``transformer.h[i].mlp`` is a
``GPT2MLP`` (``c_fc``, ``act``, ``c_proj``), ``transformer.wte`` is tied to ``lm_head``; a
block is called as ``block(hidden_states, other)`` with ``hidden_states`` the stream its
attention reads (``x2``), so a token-embedding delta entering block ``l`` passes through
its attention, as in GPT-2. The embeddings start both streams; the final norm reads their
mean. Saved as ``config.json`` + ``model.safetensors`` by ``save_pretrained``; importing
this module registers the type with ``AutoConfig`` / ``AutoModelForCausalLM`` (no remote
code). Dropout must be 0 (the backward recomputes each block and must meet the same
function).

Example
-------
>>> import torch
>>> model = ReversibleLMHeadModel(ReversibleConfig(vocab_size=50, n_embd=16, n_layer=2,
...                                                n_head=2, n_positions=8)).eval()
>>> model(input_ids=torch.tensor([[1, 2, 3]])).logits.shape
torch.Size([1, 3, 50])
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    GenerationConfig,
    PretrainedConfig,
    PreTrainedModel,
)
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.models.gpt2.modeling_gpt2 import GPT2MLP
from transformers.pytorch_utils import Conv1D

MODEL_TYPE = "worx_reversible"


class ReversibleConfig(PretrainedConfig):
    """GPT-2's field names (``n_embd``, ``n_layer``...), read also as ``hidden_size`` etc."""

    model_type = MODEL_TYPE
    attribute_map = {
        "hidden_size": "n_embd",
        "num_hidden_layers": "n_layer",
        "num_attention_heads": "n_head",
        "max_position_embeddings": "n_positions",
    }

    def __init__(
        self,
        vocab_size: int = 8192,
        n_positions: int = 256,
        n_embd: int = 256,
        n_layer: int = 4,
        n_head: int = 4,
        n_inner: int | None = None,
        activation_function: str = "gelu_new",
        resid_pdrop: float = 0.0,
        layer_norm_epsilon: float = 1e-5,
        initializer_range: float = 0.02,
        tie_word_embeddings: bool = True,
        **kwargs: Any,
    ) -> None:
        self.vocab_size = vocab_size
        self.n_positions = n_positions
        self.n_embd = n_embd
        self.n_layer = n_layer
        self.n_head = n_head
        self.n_inner = n_inner
        self.activation_function = activation_function
        self.resid_pdrop = resid_pdrop
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)


class CausalSelfAttention(nn.Module):
    """GPT-2's attention weights (``c_attn`` ``d -> 3d``, ``c_proj`` ``d -> d``) under SDPA."""

    def __init__(self, config: ReversibleConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.c_attn = Conv1D(3 * config.n_embd, config.n_embd)
        self.c_proj = Conv1D(config.n_embd, config.n_embd)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)  # (B, T, d) each
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for z in (q, k, v))
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, h, T, hs)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, d))


class ReversibleBlock(nn.Module):
    """One reversible block: ``(x2, x1) -> (y2, y1)`` (see the module docstring)."""

    def __init__(self, config: ReversibleConfig) -> None:
        super().__init__()
        d = config.n_embd
        self.ln_1 = nn.LayerNorm(d, eps=config.layer_norm_epsilon)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(d, eps=config.layer_norm_epsilon)
        self.mlp = GPT2MLP(config.n_inner or 4 * d, config)

    def forward(
        self, hidden_states: torch.Tensor, other: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        y1 = other + self.attn(self.ln_1(hidden_states), mask)  # (B, T, d)
        y2 = hidden_states + self.mlp(self.ln_2(y1))
        return y2, y1

    @torch.no_grad()
    def inverse(
        self, y2: torch.Tensor, y1: torch.Tensor, mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The inputs ``(x2, x1)`` that gave the outputs ``(y2, y1)``."""
        x2 = y2 - self.mlp(self.ln_2(y1))
        x1 = y1 - self.attn(self.ln_1(x2), mask)
        return x2, x1


class _ReversibleStack(torch.autograd.Function):
    """The blocks in sequence, holding only the two output streams for backward.

    Called as ``apply(x2, x1, mask, blocks, *params)`` with ``params`` every parameter of
    ``blocks`` (so autograd asks for their gradients); backward returns them in that order.
    Other leaves a block's recomputation reaches (an expert's adapter, through the
    mixture's hooks) get their gradient accumulated into ``.grad``, as ``backward()`` does.
    """

    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx: Any, x2, x1, mask, blocks, *params):  # noqa: ANN001 - autograd's form
        with torch.no_grad():
            for block in blocks:
                x2, x1 = block(x2, x1, mask)
        ctx.blocks, ctx.mask, ctx.params = blocks, mask, params
        ctx.save_for_backward(x2, x1)
        return x2, x1

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx: Any, g2: torch.Tensor, g1: torch.Tensor):  # noqa: ANN205
        y2, y1 = ctx.saved_tensors
        grads: dict[int, torch.Tensor] = {}  # id(parameter) -> gradient
        for block in reversed(ctx.blocks):
            x2, x1 = block.inverse(y2, y1, ctx.mask)
            params = [p for p in block.parameters() if p.requires_grad]
            with torch.enable_grad():
                a2, a1 = x2.detach().requires_grad_(), x1.detach().requires_grad_()
                out2, out1 = block(a2, a1, ctx.mask)
                own = {id(a2), id(a1), *(id(p) for p in params)}
                foreign = [t for t in _leaves((out2, out1)) if id(t) not in own]
                found = torch.autograd.grad(
                    (out2, out1), (a2, a1, *params, *foreign), (g2, g1), allow_unused=True
                )
            g2, g1 = found[0], found[1]
            for param, grad in zip(params, found[2 : 2 + len(params)], strict=True):
                if grad is not None:
                    grads[id(param)] = grad
            for leaf, grad in zip(foreign, found[2 + len(params) :], strict=True):
                if grad is not None:
                    leaf.grad = grad if leaf.grad is None else leaf.grad + grad
            y2, y1 = x2, x1
        return (g2, g1, None, None, *(grads.get(id(p)) for p in ctx.params))


def _leaves(roots: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
    """The leaf tensors requiring grad that the graphs of ``roots`` reach."""
    stack = [r.grad_fn for r in roots if r.grad_fn is not None]
    seen: set[int] = set()
    leaves: list[torch.Tensor] = []
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if hasattr(node, "variable"):  # AccumulateGrad: a leaf
            leaves.append(node.variable)
        else:
            stack.extend(next_node for next_node, _ in node.next_functions)
    return leaves


def reversible_stack(
    blocks: list[ReversibleBlock], x2: torch.Tensor, x1: torch.Tensor, mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``blocks`` applied in order, activations reconstructed in backward (not stored)."""
    params = [p for block in blocks for p in block.parameters()]
    return _ReversibleStack.apply(x2, x1, mask, list(blocks), *params)


def _attention_mask(
    attention_mask: torch.Tensor | None, t: int, dtype: torch.dtype
) -> torch.Tensor | None:
    """A boolean ``(B, 1, T, T)`` mask: causal, padded keys off, the diagonal always on (a
    padded query then attends to itself instead of to nothing); None when nothing is padded."""
    if attention_mask is None or bool(attention_mask.all()):
        return None
    causal = torch.ones(t, t, dtype=torch.bool, device=attention_mask.device).tril()  # (T, T)
    keys = attention_mask[:, None, None, -t:].bool()  # (B, 1, 1, T)
    eye = torch.eye(t, dtype=torch.bool, device=attention_mask.device)
    return (causal & keys) | eye


class ReversiblePreTrainedModel(PreTrainedModel):
    config_class = ReversibleConfig
    base_model_prefix = "transformer"
    _no_split_modules = ["ReversibleBlock"]

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """GPT-2's scheme: N(0, 0.02), the residual projections scaled by 1/sqrt(2 n_layer)."""
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, Conv1D, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        if isinstance(module, (CausalSelfAttention, GPT2MLP)):
            nn.init.normal_(
                module.c_proj.weight, mean=0.0, std=std / (2 * self.config.n_layer) ** 0.5
            )


class ReversibleModel(ReversiblePreTrainedModel):
    """The body: embeddings, the reversible blocks, the final norm over the streams' mean."""

    def __init__(self, config: ReversibleConfig) -> None:
        super().__init__(config)
        if config.resid_pdrop:
            raise ValueError(
                f"a reversible trunk needs dropout 0 (got {config.resid_pdrop}): its backward "
                "recomputes every block and must meet the same function"
            )
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.h = nn.ModuleList(ReversibleBlock(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        # False: plain autograd even when the blocks train (what the custom backward is
        # tested against)
        self.invert_in_backward = True
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.wte

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.wte = value

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        past_key_values: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Any,
    ) -> BaseModelOutputWithPast:
        """``last_hidden_state`` ``(B, T, d)``. The "cache" is the ids seen so far: with
        ``past_key_values`` the whole sequence is recomputed (no key/value cache) and the
        states of the new positions returned."""
        new = input_ids.shape[1]
        if past_key_values is not None:
            input_ids = torch.cat([past_key_values, input_ids], dim=1)  # (B, T)
        t = input_ids.shape[1]
        if t > self.config.n_positions:
            raise ValueError(f"{t} tokens exceed the trunk's {self.config.n_positions} positions")
        positions = torch.arange(t, device=input_ids.device)
        h = self.wte(input_ids) + self.wpe(positions)  # (B, T, d)
        mask = _attention_mask(attention_mask, t, h.dtype)
        blocks = list(self.h)
        training = torch.is_grad_enabled() and any(p.requires_grad for p in self.h.parameters())
        if training and self.invert_in_backward:
            x2, x1 = reversible_stack(blocks, h, h, mask)
        else:
            x2, x1 = h, h
            for block in blocks:
                x2, x1 = block(x2, x1, mask)
        hidden = self.ln_f((x1 + x2) / 2)[:, -new:]  # (B, new, d)
        return BaseModelOutputWithPast(
            last_hidden_state=hidden, past_key_values=input_ids if use_cache else None
        )


class ReversibleLMHeadModel(ReversiblePreTrainedModel):
    """The causal LM: :class:`ReversibleModel` and an output layer tied to ``wte``."""

    _tied_weights_keys = {"lm_head.weight": "transformer.wte.weight"}

    def __init__(self, config: ReversibleConfig) -> None:
        super().__init__(config)
        self.transformer = ReversibleModel(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        # what generate and experts.sampling stop at (HF sets this only for its own models)
        self.generation_config = GenerationConfig.from_model_config(config)
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head = value

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        past_key_values: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast:
        body = self.transformer(
            input_ids, attention_mask, past_key_values=past_key_values, use_cache=use_cache
        )
        logits = self.lm_head(body.last_hidden_state)  # (B, T, V)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(
                logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100
            )
        return CausalLMOutputWithPast(
            loss=loss, logits=logits, past_key_values=body.past_key_values
        )

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        max_new_tokens: int = 20,
        do_sample: bool = False,
        pad_token_id: int | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        """Greedy continuation ``(B, T + n)`` until ``max_new_tokens`` or every row has
        produced the end-of-sequence id (then padded with ``pad_token_id``), as Hugging
        Face's greedy ``generate``."""
        if do_sample:
            raise ValueError(
                "the reversible trunk's generate is greedy; sample with experts.sampling"
            )
        eos = self.generation_config.eos_token_id
        eos = set() if eos is None else {eos} if isinstance(eos, int) else set(eos)
        pad = pad_token_id if pad_token_id is not None else next(iter(eos), 0)
        ids = input_ids
        done = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
        for _ in range(max_new_tokens):
            mask = (
                None
                if attention_mask is None
                else torch.cat(
                    [attention_mask, torch.ones_like(ids[:, attention_mask.shape[1] :])], dim=1
                )
            )
            token = self(input_ids=ids, attention_mask=mask).logits[:, -1].argmax(-1)  # (B,)
            token = torch.where(done, torch.full_like(token, pad), token)
            ids = torch.cat([ids, token[:, None]], dim=1)
            done |= torch.isin(
                token, torch.tensor(sorted(eos), dtype=token.dtype, device=token.device)
            )
            if bool(done.all()):
                break
        return ids


AutoConfig.register(MODEL_TYPE, ReversibleConfig, exist_ok=True)
AutoModelForCausalLM.register(ReversibleConfig, ReversibleLMHeadModel, exist_ok=True)
