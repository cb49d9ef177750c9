"""The Transformer (s3): embeddings and positions, sublayers, encoder and decoder stacks.

`forward` trains (teacher forcing), `encode` + `init_cache` + `step` decode incrementally with the
same layer code run on a length-1 input, and `attention_maps` returns every attention weight.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..config import TransformerConfig
from . import bf16
from .attention import MultiHeadAttention, padding_mask
from .cache import DecoderCache, LayerCache
from .contract import AttentionMaps, Encoded
from .dropout import Dropout
from .matmul import Linear, linear
from .step_plan import plan_for


def sinusoidal_positions(n_positions: int, d_model: int) -> Tensor:
    """s3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(same)."""
    position = torch.arange(n_positions, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = position / 10000 ** (two_i / d_model)  # (n_positions, ceil(d_model / 2))
    table = torch.zeros(n_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return table.float()


class Embeddings(nn.Module):
    """Token embeddings scaled by sqrt(d_model) plus positions, then dropout (s3.4, s3.5, s5.4)."""

    def __init__(self, tokens: nn.Embedding, config: TransformerConfig):
        super().__init__()
        self.tokens = tokens
        self.scale = math.sqrt(config.d_model)
        self.learned = config.positions == "learned"
        self.max_positions = config.max_positions
        if self.learned:  # Table 3 row E
            self.positions = nn.Embedding(config.max_positions, config.d_model)
            nn.init.normal_(self.positions.weight, std=config.d_model**-0.5)
        else:  # a buffer, not a parameter; recomputed past its end, so any length works
            table = sinusoidal_positions(config.max_positions, config.d_model)
            self.register_buffer("sinusoid", table, persistent=False)
        self.dropout = Dropout(config.dropout)

    def forward(self, tokens: Tensor, offset: int = 0) -> Tensor:
        """(B, T) ids at positions offset..offset+T-1 -> (B, T, d_model)."""
        position = self.positions_from(offset, tokens.size(1))
        return self.dropout(self.tokens(tokens) * self.scale + position)

    def positions_from(self, offset: int, length: int) -> Tensor:
        """(length, d_model): the encodings of positions offset..offset+length-1."""
        end = offset + length
        if self.learned:
            if end > self.max_positions:
                raise ValueError(
                    f"sequence of {end} positions exceeds model.max_positions="
                    f"{self.max_positions} of the learned position table"
                )
            position = self.positions.weight[offset:end]
        else:
            table = self.sinusoid
            if end > table.size(0):
                table = sinusoidal_positions(end, table.size(1)).to(table.device)
            position = table[offset:end]
        return position.to(self.tokens.weight.dtype)


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (eq. 2), with optional dropout on the max(0, .) units."""

    def __init__(self, d_model: int, d_ff: int, relu_dropout: float = 0.0):
        super().__init__()
        self.w_1 = Linear(d_model, d_ff)
        self.w_2 = Linear(d_ff, d_model)
        self.dropout = Dropout(relu_dropout)  # a no-op at rate 0, the paper's

    def forward(self, x: Tensor) -> Tensor:
        if bf16.takes(x, self.w_1.weight, self.w_2.weight):  # the hidden units stay bfloat16
            return bf16.feed_forward(x, self.w_1, self.w_2, self.dropout)
        return self.w_2(self.dropout(torch.relu(self.w_1(x))))


class Residual(nn.Module):
    """LayerNorm(x + Dropout(Sublayer(x))) (s3.1, s5.4); pre_norm: x + Dropout(Sublayer(LN(x)))."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)
        self.pre_norm = pre_norm

    def sublayer_input(self, x: Tensor) -> Tensor:
        return self.norm(x) if self.pre_norm else x

    def add(self, x: Tensor, sublayer_output: Tensor) -> Tensor:
        y = self.dropout(sublayer_output, x)  # x + Dropout(sublayer_output), in one pass
        return y if self.pre_norm else self.norm(y)


def _attention(config: TransformerConfig) -> MultiHeadAttention:
    return MultiHeadAttention(
        config.d_model, config.h, config.d_k, config.d_v, config.attention_dropout
    )


class EncoderLayer(nn.Module):
    """Self-attention, then the feed-forward network, each in a residual block (s3.1)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.self_attn = _attention(config)
        self.self_attn_residual = Residual(config.d_model, config.dropout, config.pre_norm)
        self.ffn = FeedForward(config.d_model, config.d_ff, config.relu_dropout)
        self.ffn_residual = Residual(config.d_model, config.dropout, config.pre_norm)

    def forward(
        self, x: Tensor, src_mask: Tensor | None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        h = self.self_attn_residual.sublayer_input(x)
        a, weights = self.self_attn.self_attend(h, src_mask, need_weights)
        x = self.self_attn_residual.add(x, a)
        x = self.ffn_residual.add(x, self.ffn(self.ffn_residual.sublayer_input(x)))
        return x, weights


class DecoderLayer(nn.Module):
    """Masked self-attention, attention over the encoder output, then the FFN (s3.1)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.self_attn = _attention(config)
        self.self_attn_residual = Residual(config.d_model, config.dropout, config.pre_norm)
        self.cross_attn = _attention(config)
        self.cross_attn_residual = Residual(config.d_model, config.dropout, config.pre_norm)
        self.ffn = FeedForward(config.d_model, config.d_ff, config.relu_dropout)
        self.ffn_residual = Residual(config.d_model, config.dropout, config.pre_norm)

    def forward(
        self, x: Tensor, cache: LayerCache, src_mask: Tensor | None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """x (N, T, d_model) are the positions after those already in `cache`.

        Returns x and, on request, the self- and cross-attention weights.
        """
        h = self.self_attn_residual.sublayer_input(x)
        q, k, v = self.self_attn.project_qkv(h)
        k, v = cache.append(k, v)
        # A single new position may see every earlier one: no mask, the kernel's fastest case.
        # A branch, so a Python bool even compiled over dynamic shapes: `bool(x.size(1) > 1)` stays
        # a SymBool there, which the kernel refuses, and the graph broke around every decoder
        # self-attention (tests/test_compiled.py).
        is_causal = True if x.size(1) > 1 else False  # noqa: SIM210
        if is_causal and k.size(2) != x.size(1):
            raise ValueError("several new positions after a non-empty cache are not supported")
        a, self_weights = self.self_attn.attend(q, k, v, None, is_causal, need_weights)
        x = self.self_attn_residual.add(x, a)

        h = self.cross_attn_residual.sublayer_input(x)
        a, cross_weights = self.cross_attn(
            h, cache.cross_k, cache.cross_v, src_mask, False, need_weights
        )
        x = self.cross_attn_residual.add(x, a)
        x = self.ffn_residual.add(x, self.ffn(self.ffn_residual.sublayer_input(x)))
        return x, self_weights, cross_weights


class Transformer(nn.Module):
    """The encoder-decoder of s3 with tied embeddings (s3.4); implements `contract.Seq2Seq`."""

    written_out_steps = True  # `step` through `step_plan` where it applies; False: the layers

    def __init__(self, config: TransformerConfig, pad: int = 0):
        super().__init__()
        if config.vocab_size <= 0:
            raise ValueError("model.vocab_size must be set (it comes from the data's vocabulary)")
        self.config, self.pad = config, pad
        tgt_tokens = self._token_embedding(config)
        src_tokens = tgt_tokens if config.share_embeddings else self._token_embedding(config)
        self.src_embed = Embeddings(src_tokens, config)
        self.tgt_embed = Embeddings(tgt_tokens, config)
        self.encoder_layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.n_layers))
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(config) for _ in range(config.decoder_depth)
        )
        # A pre-norm stack leaves its sum un-normalised; a final LayerNorm closes it.
        self.encoder_norm = nn.LayerNorm(config.d_model) if config.pre_norm else nn.Identity()
        self.decoder_norm = nn.LayerNorm(config.d_model) if config.pre_norm else nn.Identity()
        self.output = (
            None if config.tie_output else Linear(config.d_model, config.vocab_size, bias=False)
        )
        self._init_linear_weights()

    def _token_embedding(self, config: TransformerConfig) -> nn.Embedding:
        embedding = nn.Embedding(config.vocab_size, config.d_model, padding_idx=self.pad)
        # std d_model^-0.5: after the sqrt(d_model) scale each embedding has unit variance.
        nn.init.normal_(embedding.weight, std=config.d_model**-0.5)
        with torch.no_grad():
            embedding.weight[self.pad].zero_()
        return embedding

    def _init_linear_weights(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    @property
    def max_positions(self) -> int | None:
        """Learned positions end at their table; sinusoids extend to any length (s3.5)."""
        return self.config.max_positions if self.config.positions == "learned" else None

    # --- the entry points of the contract -----------------------------------------------------

    def forward(
        self, src: Tensor, tgt_in: Tensor, project: bool = True, src_padded: bool = True
    ) -> Tensor:
        """Teacher forcing: src (B, S), tgt_in (B, T) -> logits (B, T, V); `project=False`: the
        decoder's last states (B, T, d_model), for the loss to project (`output_weight`) in
        chunks (training/loss.py). `src_padded=False` promises that no source is padded (the
        batch's token count, known on the host, says so): attention then takes no mask, and a
        GPU its flash kernel, which takes none."""
        encoded, _ = self._encode(src, need_weights=False, src_padded=src_padded)
        cache = self._cache(encoded, 1, for_steps=False)
        out, _ = self._decode(tgt_in, cache, project=project, src_padded=src_padded)
        return out

    @property
    def output_weight(self) -> Tensor:
        """The pre-softmax projection (V, d_model): the shared target embedding (s3.4), or its
        own matrix when the output is untied."""
        return self.tgt_embed.tokens.weight if self.output is None else self.output.weight

    def encode(self, src: Tensor) -> Encoded:
        """src (B, S) -> the encoder's output (B, S, d_model) and the padding mask."""
        memory, _ = self._encode(src, need_weights=False)
        return memory

    def init_cache(self, encoded: Encoded, group: int = 1) -> DecoderCache:
        """Cross-attention keys and values, once per sentence; `group` rows (beams) each."""
        return self._cache(encoded, group, for_steps=True)

    def _cache(self, encoded: Encoded, group: int, for_steps: bool) -> DecoderCache:
        layers = []
        for layer in self.decoder_layers:
            k, v = layer.cross_attn.project_kv(encoded.memory)  # heads interleaved in memory
            if for_steps:  # else every step's products would copy them into heads first
                k, v = k.contiguous(), v.contiguous()
            layers.append(LayerCache(k, v))
        return DecoderCache(layers, encoded.src_pad_mask, group)

    def step(self, tokens: Tensor, cache: DecoderCache) -> Tensor:
        """The next position: tokens (N, 1), the last output of each row -> logits (N, V).

        On a CPU written out by a `step_plan.StepPlan`, bit for bit the layers' outputs."""
        plan = plan_for(self, tokens, cache) if self.written_out_steps else None
        if plan is not None:
            return plan.step(tokens, cache)
        logits, _ = self._decode(tokens, cache)
        return logits[:, -1]

    def attention_maps(self, src: Tensor, tgt_in: Tensor) -> tuple[Tensor, AttentionMaps]:
        """Teacher forcing through the reference attention path: logits and every weight."""
        encoded, encoder_self = self._encode(src, need_weights=True)
        logits, (decoder_self, decoder_cross) = self._decode(
            tgt_in, self._cache(encoded, 1, for_steps=False), need_weights=True
        )
        maps = AttentionMaps(decoder_cross, encoder_self=encoder_self, decoder_self=decoder_self)
        return logits, maps

    # --- the stacks -------------------------------------------------------------------------

    def _encode(
        self, src: Tensor, need_weights: bool, src_padded: bool = True
    ) -> tuple[Encoded, list[Tensor]]:
        src_pad_mask = padding_mask(src, self.pad)
        # (B, 1, 1, S): every query, every head
        attn_mask = src_pad_mask[:, None, None, :] if src_padded else None
        x = self.src_embed(src)
        weights = []
        for layer in self.encoder_layers:
            x, w = layer(x, attn_mask, need_weights)
            weights.append(w)
        return Encoded(self.encoder_norm(x), src_pad_mask), weights

    def _decode(
        self,
        tgt_in: Tensor,
        cache: DecoderCache,
        need_weights: bool = False,
        project: bool = True,
        src_padded: bool = True,
    ) -> tuple[Tensor, tuple[list[Tensor], list[Tensor]]]:
        # Target padding needs no mask: it comes last, so the causal mask hides it from every
        # real position, and its own outputs are never scored.
        x = self.tgt_embed(tgt_in, offset=cache.length)
        src_mask = cache.src_pad_mask[:, None, None, :] if src_padded else None  # (B, 1, 1, S)
        self_weights, cross_weights = [], []
        for layer, layer_cache in zip(self.decoder_layers, cache.layers, strict=True):
            x, w_self, w_cross = layer(x, layer_cache, src_mask, need_weights)
            self_weights.append(w_self)
            cross_weights.append(w_cross)
        cache.length += tgt_in.size(1)
        x = self.decoder_norm(x)
        out = linear(x, self.output_weight) if project else x  # (N, T, V) or (N, T, d_model)
        return out, (self_weights, cross_weights)
