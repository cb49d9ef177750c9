"""The Transformer's decoding step written out, for the CPU: one new position per row, the layers'
operations in their order without their modules' calls.

At a sentence at a time (beam 4: four rows) a step of `small` multiplies 19 weights in ~1.4 ms,
and the modules' step took 4-6 ms: the rest was Python, each module's call, `linear`'s checks at
every product and the attention's branches, all asked again at every step although the answers
hold for a whole search. A `StepPlan` asks them once, when the search's first step comes: whether
the layers are this package's own, unhooked and in eval mode, and which route each product takes
(`matmul.product_for_decoding`; under `--int8` or bfloat16 decoding, which products may take
those, each still choosing by its row count as `linear` does). A step then runs the same
operators on the same shapes, so its outputs are the modules' bit for bit
(tests/test_step_plan.py); where anything is out of the ordinary (training, gradients, a GPU,
hooks, a layer swapped for another kind) the modules decode.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import matmul
from .attention import MultiHeadAttention, attention_reference, row_outputs, sentence_queries
from .cache import DecoderCache, LayerCache

Product = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class Norm:
    """A LayerNorm's parameters, applied as `nn.LayerNorm` applies them."""

    weight: Tensor
    bias: Tensor
    eps: float

    @classmethod
    def of(cls, norm: nn.LayerNorm) -> Norm:
        return cls(norm.weight, norm.bias, norm.eps)

    def __call__(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


@dataclass(frozen=True)
class LayerPlan:
    """One decoder layer's products and norms; `widths` split the stacked q, k, v product."""

    qkv: Product
    widths: list[int]
    self_out: Product
    cross_q: Product
    cross_out: Product
    ffn_in: Product
    ffn_out: Product
    norms: tuple[Norm, Norm, Norm]  # before (pre-norm) or after (post-norm) each sublayer


class StepPlan:
    """A Transformer's decoding step with every per-search question answered (`plan_for`)."""

    def __init__(self, model: nn.Module, padded: bool):
        config = model.config
        self.h, self.d_v = config.h, config.d_v
        self.pre_norm = config.pre_norm
        self.padded = padded  # whether any source is padded: else no mask to apply
        self.embed = model.tgt_embed
        self.layers = [_layer_plan(layer) for layer in model.decoder_layers]
        self.final_norm = Norm.of(model.decoder_norm) if config.pre_norm else None
        self.output = matmul.product_for_decoding(model.output_weight, None)

    def step(self, tokens: Tensor, cache: DecoderCache) -> Tensor:
        """tokens (N, 1) -> logits (N, V), as `Transformer.step` (whose `_decode` this follows)."""
        # `Embeddings` in eval mode, over (N, d_model) rather than (N, 1, d_model)
        position = self.embed.positions_from(cache.length, 1)
        x = F.embedding(tokens[:, 0], self.embed.tokens.weight) * self.embed.scale + position
        mask = cache.src_pad_mask[:, None, None, :] if self.padded else None  # (B, 1, 1, S)
        for layer, layer_cache in zip(self.layers, cache.layers, strict=True):
            self_norm, cross_norm, ffn_norm = layer.norms
            x = self._residual(x, self_norm, self._self_attention, layer, layer_cache)
            x = self._residual(x, cross_norm, self._cross_attention, layer, layer_cache, mask)
            x = self._residual(x, ffn_norm, self._ffn, layer)
        cache.length += 1
        if self.final_norm is not None:
            x = self.final_norm(x)
        return self.output(x)

    def _residual(self, x: Tensor, norm: Norm, sublayer: Callable, *context) -> Tensor:
        """`Residual` in eval mode: x + Sublayer(LN(x)) (pre-norm) or LN(x + Sublayer(x))."""
        if self.pre_norm:
            return x + sublayer(norm(x), *context)
        return norm(x + sublayer(x, *context))

    def _self_attention(self, x: Tensor, layer: LayerPlan, cache: LayerCache) -> Tensor:
        q, k, v = (self._heads(part) for part in layer.qkv(x).split(layer.widths, dim=-1))
        k, v = cache.append(k, v)
        return layer.self_out(self._attend(q, k, v, None))

    def _cross_attention(
        self, x: Tensor, layer: LayerPlan, cache: LayerCache, mask: Tensor | None
    ) -> Tensor:
        q = self._heads(layer.cross_q(x))
        return layer.cross_out(self._attend(q, cache.cross_k, cache.cross_v, mask))

    def _ffn(self, x: Tensor, layer: LayerPlan) -> Tensor:
        return layer.ffn_out(torch.relu(layer.ffn_in(x)))

    def _heads(self, x: Tensor) -> Tensor:
        """(N, h * d) -> (N, h, 1, d), the shape the modules' attention gets."""
        return x.view(x.size(0), 1, self.h, -1).transpose(1, 2)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
        """`MultiHeadAttention.attend` at one query a row on the CPU (the explicit formula):
        q (N, h, 1, d_k) over k, v (B, h, S, .), a sentence's rows as extra queries of its
        keys. -> (N, h * d_v)."""
        n_rows = q.size(0)
        out, _ = attention_reference(sentence_queries(q, k.size(0)), k, v, mask)
        return row_outputs(out, n_rows, 1).transpose(1, 2).reshape(n_rows, self.h * self.d_v)


def _layer_plan(layer: nn.Module) -> LayerPlan:
    self_attn, cross_attn, ffn = layer.self_attn, layer.cross_attn, layer.ffn
    stacked_weight, stacked_bias = self_attn._stacked_qkv()
    product = matmul.product_for_decoding
    residuals = (layer.self_attn_residual, layer.cross_attn_residual, layer.ffn_residual)
    return LayerPlan(
        qkv=product(stacked_weight, stacked_bias),
        widths=[self_attn.h * self_attn.d_k] * 2 + [self_attn.h * self_attn.d_v],
        self_out=product(self_attn.w_o.weight, self_attn.w_o.bias),
        cross_q=product(cross_attn.w_q.weight, cross_attn.w_q.bias),
        cross_out=product(cross_attn.w_o.weight, cross_attn.w_o.bias),
        ffn_in=product(ffn.w_1.weight, ffn.w_1.bias),
        ffn_out=product(ffn.w_2.weight, ffn.w_2.bias),
        norms=tuple(Norm.of(residual.norm) for residual in residuals),
    )


def plan_for(model: nn.Module, tokens: Tensor, cache: DecoderCache) -> StepPlan | None:
    """The plan for this search's steps, made at its first and kept on `cache`; None where the
    modules must decode: see `_plain_decoding`."""
    if tokens.size(1) != 1 or torch.is_grad_enabled():
        return None
    if cache.plan is None:
        if not _plain_decoding(model, tokens):
            cache.plan = False
            return None
        cache.plan = StepPlan(model, padded=not bool(cache.src_pad_mask.all()))
    return cache.plan or None


def _plain_decoding(model: nn.Module, tokens: Tensor) -> bool:
    """Whether the written-out step computes what the modules would: on the CPU (where the
    attention of one query takes the explicit formula), in eval mode, every decoder module of
    this package's own kinds with the parameters they are made with, and no hook to call."""
    if model.training or tokens.device.type != "cpu" or _global_hooks():
        return False
    from .transformer import Embeddings  # it imports this module

    modules = [*model.tgt_embed.modules(), model.decoder_norm, *model.decoder_layers.modules()]
    if any(m._forward_hooks or m._forward_pre_hooks for m in modules):
        return False
    embed = model.tgt_embed
    return (
        type(embed) is Embeddings
        and type(embed.tokens) is nn.Embedding
        and (not model.config.pre_norm or _plain_norm(model.decoder_norm))
        and all(_plain_layer(layer) for layer in model.decoder_layers)
    )


def _plain_layer(layer: nn.Module) -> bool:
    from .transformer import DecoderLayer, FeedForward, Residual  # it imports this module

    attentions = (layer.self_attn, layer.cross_attn)
    residuals = (layer.self_attn_residual, layer.cross_attn_residual, layer.ffn_residual)
    linears = [m for m in layer.modules() if isinstance(m, nn.Linear)]
    return (
        type(layer) is DecoderLayer
        and all(type(a) is MultiHeadAttention for a in attentions)
        and type(layer.ffn) is FeedForward
        and all(type(r) is Residual and _plain_norm(r.norm) for r in residuals)
        and all(type(m) is matmul.Linear and m.bias is not None for m in linears)
    )


def _plain_norm(norm: nn.Module) -> bool:
    return type(norm) is nn.LayerNorm and norm.weight is not None and norm.bias is not None


def _global_hooks() -> bool:
    hooks = nn.modules.module
    return bool(hooks._global_forward_hooks or hooks._global_forward_pre_hooks)
