"""One encoder layer, step by step, with every number (s3.1-s3.5), as tutorials print them.

`explain` walks a short sentence through one encoder layer the way the Illustrated and the
Annotated Transformer do: X = embedding x sqrt(d_model) + position, then per head Q, K, V, QK^T,
the division by sqrt(d_k), the mask, the row-wise softmax, Z = softmax(.)V; the concatenation and
W_O, the residual and LayerNorm (post-norm as the paper, or pre-norm, as the model is
configured), the feed-forward network. Each number is recomputed here from the module's own
parameters, and a test compares every step with the module's forward pass, so the explanation
cannot drift from the code. Without a model, a tiny seeded random one over the sentence's words.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from ..config import TransformerConfig
from ..models import Seq2Seq, build_model
from ..models.attention import padding_mask
from ..models.saved import load_model
from ..models.transformer import sinusoidal_positions

SPECIALS = ["<pad>", "<unk>", "<s>", "</s>"]  # ids 0-3, as every vocabulary here has them


@dataclass
class Step:
    """One printed tensor: `key` to find it, `title` the formula, `note` what to see in it."""

    key: str
    title: str
    value: Tensor  # (rows, columns)
    rows: list[str]
    columns: list[str]
    note: str = ""


@dataclass
class Explanation:
    sentence: str
    tokens: list[str]
    settings: dict[str, object]  # d_model, h, d_k, d_v, d_ff, pre_norm, layer
    steps: list[Step] = field(default_factory=list)

    def __getitem__(self, key: str) -> Tensor:
        for step in self.steps:
            if step.key == key:
                return step.value
        raise KeyError(f"no step {key!r}; steps: {[s.key for s in self.steps]}")

    def as_dict(self) -> dict:
        """Plain lists and strings, for JSON and notebooks."""
        steps = [
            {
                **{k: getattr(s, k) for k in ("key", "title", "note", "rows", "columns")},
                "value": s.value.tolist(),
            }
            for s in self.steps
        ]
        return {
            "sentence": self.sentence,
            "tokens": self.tokens,
            "settings": self.settings,
            "steps": steps,
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=1, ensure_ascii=False)

    def text(self, max_rows: int = 12, max_columns: int = 8, decimals: int = 4) -> str:
        """The steps as tutorials print them: a title, a note, a labelled matrix."""
        header = ", ".join(f"{k}={v}" for k, v in self.settings.items())
        parts = [f"sentence: {self.sentence}", f"tokens: {' '.join(self.tokens)}", header]
        for number, step in enumerate(self.steps, start=1):
            rows, columns = step.value.shape
            parts.append(f"\n[{number}] {step.title}   ({rows} x {columns})")
            if step.note:
                parts.append(f"    {step.note}")
            parts.append(_matrix(step, max_rows, max_columns, decimals))
        return "\n".join(parts)

    def __str__(self) -> str:
        return self.text()


def _matrix(step: Step, max_rows: int, max_columns: int, decimals: int) -> str:
    width = max(decimals + 4, *(len(c) for c in step.columns[:max_columns]))
    label_width = max(len(r) for r in step.rows)
    more = " …" if len(step.columns) > max_columns else ""
    lines = [" " * (label_width + 4) + " ".join(c.rjust(width) for c in step.columns[:max_columns])]
    for label, row in list(zip(step.rows, step.value, strict=True))[:max_rows]:
        cells = " ".join(f"{float(v):{width}.{decimals}f}" for v in row[:max_columns])
        lines.append(f"    {label.rjust(label_width)} {cells}{more}")
    if len(step.rows) > max_rows:
        lines.append(f"    … {len(step.rows) - max_rows} more rows")
    return "\n".join(lines)


class _ToyVocab:
    """The sentence's own words after the four special tokens: a vocabulary for a random model."""

    def __init__(self, words: list[str]):
        self.words = SPECIALS + sorted(set(words), key=words.index)
        self.size, self.pad, self.eos = len(self.words), 0, 3


def explain(
    sentence: str,
    model: str | Path | None = None,
    *,
    seed: int = 0,
    d_model: int = 4,
    heads: int = 2,
    layer: int = 0,
) -> Explanation:
    """Walk `sentence` through encoder layer `layer` of `model` (a run folder or checkpoint
    file), or of a tiny random model (seeded; d_model, heads; d_ff = 4 d_model as the paper's
    2048 / 512) whose vocabulary is the sentence's words."""
    if model is None:
        words = sentence.split()
        if not words:
            raise ValueError("explain needs a sentence of at least one word")
        if d_model % heads:
            raise ValueError(f"d_model={d_model} must be a multiple of heads={heads}")
        vocab = _ToyVocab(words)
        config = TransformerConfig(
            n_layers=1,
            d_model=d_model,
            d_ff=4 * d_model,
            h=heads,
            d_k=d_model // heads,
            d_v=d_model // heads,
            dropout=0.0,
        )
        torch.manual_seed(seed)
        network = build_model(config, vocab).eval()
        ids = [vocab.words.index(w) for w in words] + [vocab.eos]
        labels = [*words, "</s>"]
    else:
        saved = load_model(model)
        network, vocab = saved.model, saved.vocab
        ids = vocab.encode([sentence.strip()])[0] + [vocab.eos]
        labels = [*vocab.pieces(ids[:-1]), "</s>"]
    return explain_layer(network, torch.tensor([ids]), labels, layer, sentence.strip())


@torch.no_grad()
def explain_layer(
    model: Seq2Seq, src: Tensor, labels: list[str], layer: int = 0, sentence: str = ""
) -> Explanation:
    """The steps of encoder layer `layer` on one sentence src (1, S) of a model with the
    Transformer's encoder (embeddings, `encoder_layers`)."""
    layers = getattr(model, "encoder_layers", None)
    if layers is None:
        raise ValueError("explain walks a Transformer encoder layer (s3); this model has none")
    if not 0 <= layer < len(layers):
        raise ValueError(f"layer {layer}: the encoder has layers 0 to {len(layers) - 1}")
    block = layers[layer]
    attention = block.self_attn
    settings = {
        "d_model": model.src_embed.tokens.weight.size(1),
        "h": attention.h,
        "d_k": attention.d_k,
        "d_v": attention.d_v,
        "d_ff": block.ffn.w_1.out_features,
        "pre_norm": block.self_attn_residual.pre_norm,
        "layer": layer,
    }
    found = Explanation(sentence, labels, settings)
    x = _embedding_steps(found, model, src)
    mask = padding_mask(src, model.pad)[0]  # (S,) True at real tokens
    if layer > 0:  # the input of a later layer is the output of those before, as computed
        found.steps[-1].key = "X_embed"
        for earlier in layers[:layer]:
            x = earlier(x[None], mask[None, None, None, :])[0][0]
        _add(found, "X", f"X = the output of encoder layer {layer - 1}", x, "dim")
    x = _attention_steps(found, block, x, mask)
    _ffn_steps(found, block, x)
    return found


def _add(found: Explanation, key: str, title: str, value: Tensor, columns, note: str = "") -> None:
    """Append a step; `columns` "dim" numbers them, "tokens" labels them with the tokens."""
    names = found.tokens if columns == "tokens" else [str(i) for i in range(value.size(1))]
    found.steps.append(Step(key, title, value.clone(), found.tokens, names, note))


def _layer_norm(norm, x: Tensor) -> Tensor:
    """(x - mean) / sqrt(var + eps) * gain + bias, over the last dimension (biased variance)."""
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def _linear(module, x: Tensor) -> Tensor:
    """x W^T + b, as the paper writes x W."""
    return x @ module.weight.T + module.bias


def _embedding_steps(found: Explanation, model, src: Tensor) -> Tensor:
    embed = model.src_embed
    ids = src[0]
    e = embed.tokens.weight[ids]  # (S, d_model)
    _add(found, "E", "token embeddings E (one row per token)", e, "dim")
    scaled = e * embed.scale
    _add(
        found,
        "E_scaled",
        f"E x sqrt(d_model) = E x {embed.scale:.4f}",
        scaled,
        "dim",
        "s3.4: the embedding weights are multiplied by sqrt(d_model)",
    )
    if getattr(embed, "learned", False):
        pe = embed.positions.weight[: len(ids)]
        pe_note = "Table 3 row E: learned positions"
    else:
        pe = sinusoidal_positions(len(ids), e.size(1)).to(e.dtype)
        pe_note = "s3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(...)"
    _add(found, "PE", "positional encoding PE", pe, "dim", pe_note)
    x = scaled + pe
    _add(
        found,
        "X",
        "X = E x sqrt(d_model) + PE (the encoder's input)",
        x,
        "dim",
        "dropout is off at inference, so this is what the first layer sees",
    )
    return x


def _attention_steps(found: Explanation, block, x: Tensor, mask: Tensor) -> Tensor:
    residual, attention = block.self_attn_residual, block.self_attn
    h = x
    if residual.pre_norm:
        h = _layer_norm(residual.norm, x)
        _add(found, "H", "LayerNorm(X)  (pre-norm: normalise before the sublayer)", h, "dim")
    q, k, v = (_linear(w, h) for w in (attention.w_q, attention.w_k, attention.w_v))
    for key, value in (("Q", q), ("K", k), ("V", v)):
        _add(
            found,
            key,
            f"{key} = {'X' if not residual.pre_norm else 'H'} W_{key} + b_{key}  "
            "(all heads side by side)",
            value,
            "dim",
        )
    z = [_head_steps(found, i, q, k, v, mask, attention) for i in range(attention.h)]
    concat = torch.cat(z, dim=-1)  # (S, h * d_v)
    _add(found, "concat", "Concat(Z_0, ..., Z_h-1)", concat, "dim")
    out = _linear(attention.w_o, concat)
    _add(
        found,
        "multihead",
        "MultiHead = Concat(Z) W_O + b_O",
        out,
        "dim",
        "s3.2.2: the heads' outputs are joined and projected back to d_model",
    )
    total = x + out
    _add(found, "sum_1", "X + MultiHead  (residual connection)", total, "dim")
    if residual.pre_norm:
        _add(
            found,
            "X_1",
            "X_1 = X + MultiHead  (pre-norm: no LayerNorm after the sum)",
            total,
            "dim",
        )
        return total
    x_1 = _layer_norm(residual.norm, total)
    _add(
        found,
        "X_1",
        "X_1 = LayerNorm(X + MultiHead)  (s3.1, post-norm)",
        x_1,
        "dim",
        "each row now has mean 0 and variance 1, then the LayerNorm's gain and bias",
    )
    return x_1


def _head_steps(found: Explanation, i: int, q, k, v, mask: Tensor, attention) -> Tensor:
    d_k, d_v = attention.d_k, attention.d_v
    q_i, k_i = q[:, i * d_k : (i + 1) * d_k], k[:, i * d_k : (i + 1) * d_k]  # (S, d_k)
    v_i = v[:, i * d_v : (i + 1) * d_v]  # (S, d_v)
    for key, value in (("Q", q_i), ("K", k_i), ("V", v_i)):
        _add(found, f"{key}_{i}", f"head {i}: {key}_{i} (columns {i} x d_k of {key})", value, "dim")
    scores = q_i @ k_i.T  # (S, S): query rows, key columns
    _add(
        found,
        f"scores_{i}",
        f"head {i}: Q_{i} K_{i}^T",
        scores,
        "tokens",
        "row = the query token, column = the key token",
    )
    scaled = scores / math.sqrt(d_k)
    _add(
        found,
        f"scaled_{i}",
        f"head {i}: Q_{i} K_{i}^T / sqrt(d_k) = ... / {math.sqrt(d_k):.4f}",
        scaled,
        "tokens",
        "eq. 1: dividing by sqrt(d_k) keeps the softmax out of its flat ends",
    )
    masked = scaled.masked_fill(~mask[None, :], float("-inf"))
    _add(
        found,
        f"masked_{i}",
        f"head {i}: masked (keys at padding set to -inf)",
        masked,
        "tokens",
        "one sentence has no padding, so nothing is masked here",
    )
    weights = torch.softmax(masked, dim=-1)
    _add(
        found,
        f"weights_{i}",
        f"head {i}: softmax(QK^T / sqrt(d_k)), row by row",
        weights,
        "tokens",
        "each row sums to 1: how much each query token takes from each token",
    )
    z = weights @ v_i  # (S, d_v)
    _add(found, f"Z_{i}", f"head {i}: Z_{i} = softmax(.) V_{i}", z, "dim")
    return z


def _ffn_steps(found: Explanation, block, x: Tensor) -> Tensor:
    residual, ffn = block.ffn_residual, block.ffn
    h = x
    if residual.pre_norm:
        h = _layer_norm(residual.norm, x)
        _add(found, "H_ffn", "LayerNorm(X_1)  (pre-norm)", h, "dim")
    hidden = torch.relu(_linear(ffn.w_1, h))
    _add(
        found,
        "ffn_hidden",
        "max(0, x W_1 + b_1)  (eq. 2, d_ff wide)",
        hidden,
        "dim",
        "the ReLU zeroes the negative entries",
    )
    out = _linear(ffn.w_2, hidden)
    _add(found, "ffn", "FFN(x) = max(0, x W_1 + b_1) W_2 + b_2", out, "dim")
    total = x + out
    _add(found, "sum_2", "X_1 + FFN  (residual connection)", total, "dim")
    if residual.pre_norm:
        _add(
            found,
            "output",
            "layer output = X_1 + FFN  (pre-norm; the stack's final "
            "LayerNorm comes after the last layer)",
            total,
            "dim",
        )
        return total
    output = _layer_norm(residual.norm, total)
    _add(found, "output", "layer output = LayerNorm(X_1 + FFN)", output, "dim")
    return output
