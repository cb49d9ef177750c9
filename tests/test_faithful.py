"""The architecture of s3, checked against a hand-written reference on small float64 tensors.

Each function below writes one of the paper's formulas out with plain tensor operations and the
module's own weights; the module must compute the same numbers. Positional encodings are
recomputed here from s3.5 with `math.sin` / `math.cos`, not taken from the module.
"""

import math

import pytest
import torch

from transduce.models.transformer import FeedForward

from .conftest import EOS, PAD, tiny_model

D_K, D_V = 6, 5  # apart from d_model / h = 8, as Table 3 rows A and B need


def _model(**changes):
    settings = dict(d_k=D_K, d_v=D_V, dropout=0.0) | changes
    return tiny_model(7, **settings)


def linear(x, layer):
    return x @ layer.weight.T + layer.bias


def layer_norm(x, norm):
    mean = x.mean(-1, keepdim=True)
    variance = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(variance + norm.eps) * norm.weight + norm.bias


def feed_forward(x, ffn):
    """eq. 2: FFN(x) = max(0, x W1 + b1) W2 + b2."""
    hidden = torch.maximum(torch.zeros(()), x @ ffn.w_1.weight.T + ffn.w_1.bias)
    return hidden @ ffn.w_2.weight.T + ffn.w_2.bias


def multi_head(queries, keys, attention, may_attend):
    """s3.2.2: Concat(head_1..head_h) W^O, head_i = softmax(Q_i K_i^T / sqrt(d_k)) V_i."""
    heads = []
    for i in range(attention.h):
        q = linear(queries, attention.w_q)[..., i * D_K : (i + 1) * D_K]
        k = linear(keys, attention.w_k)[..., i * D_K : (i + 1) * D_K]
        v = linear(keys, attention.w_v)[..., i * D_V : (i + 1) * D_V]
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(D_K)
        scores = scores.masked_fill(~may_attend, -math.inf)
        heads.append(torch.softmax(scores, dim=-1) @ v)
    return linear(torch.cat(heads, dim=-1), attention.w_o)


def sublayer(x, residual, compute):
    """Post-norm (s3.1): LayerNorm(x + Sublayer(x)); pre-norm: x + Sublayer(LayerNorm(x))."""
    if residual.pre_norm:
        return x + compute(layer_norm(x, residual.norm))
    return layer_norm(x + compute(x), residual.norm)


def positions(length, d_model):
    """s3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d))."""
    table = torch.zeros(length, d_model, dtype=torch.float64)
    for pos in range(length):
        for i in range(0, d_model, 2):
            table[pos, i] = math.sin(pos / 10000 ** (i / d_model))
            table[pos, i + 1] = math.cos(pos / 10000 ** (i / d_model))
    return table


def embed(tokens, embedding):
    """s3.4: the embedding weights multiplied by sqrt(d_model), plus the positions."""
    d_model = embedding.weight.size(1)
    table = positions(tokens.size(1), d_model).float().double()  # the module stores float32
    return embedding.weight[tokens] * math.sqrt(d_model) + table


def reference_logits(model, src, tgt):
    src_real = (src != PAD)[:, None, :]  # (B, 1, S)
    x = embed(src, model.src_embed.tokens)
    for layer in model.encoder_layers:
        x = sublayer(
            x, layer.self_attn_residual, lambda h, a=layer.self_attn: multi_head(h, h, a, src_real)
        )
        x = sublayer(x, layer.ffn_residual, lambda h, f=layer.ffn: feed_forward(h, f))
    memory = layer_norm(x, model.encoder_norm) if model.config.pre_norm else x
    causal = torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool).tril()
    y = embed(tgt, model.tgt_embed.tokens)
    for layer in model.decoder_layers:
        y = sublayer(
            y, layer.self_attn_residual, lambda h, a=layer.self_attn: multi_head(h, h, a, causal)
        )
        y = sublayer(
            y,
            layer.cross_attn_residual,
            lambda h, a=layer.cross_attn: multi_head(h, memory, a, src_real),
        )
        y = sublayer(y, layer.ffn_residual, lambda h, f=layer.ffn: feed_forward(h, f))
    y = layer_norm(y, model.decoder_norm) if model.config.pre_norm else y
    return y @ model.tgt_embed.tokens.weight.T  # s3.4: the softmax shares the embedding


SRC = torch.tensor([[4, 5, 6, 7, EOS], [8, 9, EOS, PAD, PAD]])
TGT = torch.tensor([[2, 10, 11, 4], [2, 6, 5, 9]])


@pytest.mark.parametrize("pre_norm", [False, True], ids=["post-norm", "pre-norm"])
def test_the_whole_model_is_the_papers_formulas(pre_norm):
    model = _model(pre_norm=pre_norm)
    torch.testing.assert_close(
        model(SRC, TGT), reference_logits(model, SRC, TGT), rtol=0, atol=1e-10
    )


def test_a_post_norm_encoder_layer_is_layer_norm_of_x_plus_sublayer_x():
    model = _model()
    layer = model.encoder_layers[0]
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    may_attend = torch.ones(2, 1, 5, dtype=torch.bool)
    attended = layer_norm(
        x + multi_head(x, x, layer.self_attn, may_attend), layer.self_attn_residual.norm
    )
    expected = layer_norm(attended + feed_forward(attended, layer.ffn), layer.ffn_residual.norm)
    out, _ = layer(x, may_attend[:, None])
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


def test_the_feed_forward_network_is_equation_2():
    ffn = _model().encoder_layers[0].ffn
    x = torch.randn(3, 4, 16, dtype=torch.float64)
    torch.testing.assert_close(ffn(x), feed_forward(x, ffn), rtol=0, atol=1e-12)
    assert (torch.relu(linear(x, ffn.w_1)) == 0).any()  # the max(0, .) is exercised


def test_source_and_target_embeddings_are_both_scaled_by_sqrt_d_model():
    model = _model(share_embeddings=False, tie_output=False)
    assert model.src_embed.tokens is not model.tgt_embed.tokens
    for embeddings, tokens in ((model.src_embed, SRC), (model.tgt_embed, TGT)):
        torch.testing.assert_close(
            embeddings(tokens), embed(tokens, embeddings.tokens), rtol=0, atol=1e-12
        )


# --- dropout where s5.4 puts it: in training, each element is dropped or scaled by 1 / (1 - p) ---


def _dropped_or_doubled(out, kept):
    """Every element of `out` is 0 (dropped) or 2 * `kept` (p = 0.5), and both occur."""
    dropped, doubled = out == 0, torch.isclose(out, 2 * kept, rtol=0, atol=1e-12)
    assert (dropped | doubled).all() and dropped.any() and (doubled & (kept != 0)).any()


def test_dropout_falls_on_the_sum_of_the_embeddings_and_the_positions():
    # s5.4: "dropout to the sums of the embeddings and the positional encodings"
    model = _model(dropout=0.5).train()
    torch.manual_seed(0)
    _dropped_or_doubled(model.src_embed(SRC), embed(SRC, model.src_embed.tokens))


def test_residual_dropout_falls_on_the_sublayer_output_before_it_is_added():
    # s5.4: dropout on "the output of each sub-layer, before it is added to the sub-layer input"
    residual = _model(dropout=0.5, pre_norm=True).encoder_layers[0].ffn_residual.train()
    x, sublayer_output = torch.randn(2, 2, 5, 16, dtype=torch.float64)
    torch.manual_seed(0)
    _dropped_or_doubled(residual.add(x, sublayer_output) - x, sublayer_output)


def test_relu_dropout_falls_on_the_hidden_units_of_equation_2():
    # relu_dropout drops max(0, x W1 + b1) before W2 and b2 (the FFN's docstring)
    ffn = FeedForward(8, 8, relu_dropout=0.5).double().train()
    with torch.no_grad():  # W2 = I, b2 = 1: the output shows the dropped hidden units plus b2
        ffn.w_2.weight.copy_(torch.eye(8))
        ffn.w_2.bias.fill_(1.0)
    x = torch.randn(3, 4, 8, dtype=torch.float64)
    torch.manual_seed(0)
    _dropped_or_doubled(ffn(x) - 1.0, torch.relu(linear(x, ffn.w_1)))
