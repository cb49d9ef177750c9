"""Session 44 (issue 17): two ways to run beam search's step on the CPU, each against
`Transformer.step` through the layers, in one process, alternating; the same outputs asserted by
digest. Neither kept: see SPEED.md, session 44.

- `written-out`: the step over (rows, d_model) tensors, no module calls, the source mask added
  once a step (the prototype; decoded under `torch.inference_mode`, as it was measured);
- `compiled` (a spike): the step as one functional graph under `torch.compile(dynamic=True)`,
  for pre-norm models with sinusoidal positions and tied embeddings (`small`); decoded under
  `torch.no_grad`, after a warm-up that compiles.

    python benchmarks/runs/speed/s44-decode-step.py written-out RUN PREPARED BATCH LINES ROUNDS
    [CPP_WRAPPER=1] [FREEZING=1] python benchmarks/runs/speed/s44-decode-step.py compiled ...
"""

import hashlib
import math
import os
import sys
import time
import types

import torch
import torch._inductor.config as inductor
import torch.nn.functional as F

from transduce.config import DecodeConfig
from transduce.data.dataset import PreparedData
from transduce.decoding.translate import Translator, decode_ids
from transduce.models.matmul import linear

inductor.cpp_wrapper = bool(os.environ.get("CPP_WRAPPER"))
inductor.freezing = bool(os.environ.get("FREEZING"))  # weights as constants, packed for oneDNN


def _norm(norm, x):
    return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)


# --- written out ---------------------------------------------------------------------------


def lean_step(model, tokens, cache):
    cfg = model.config
    N = tokens.size(0)
    emb = model.tgt_embed
    t = cache.length
    x = torch.add(
        emb.sinusoid[t], F.embedding(tokens.view(-1), emb.tokens.weight), alpha=emb.scale
    )  # (N, d)
    B = cache.src_pad_mask.size(0)
    g = N // B
    mask_bias = None
    pre = cfg.pre_norm
    for layer, lc in zip(model.decoder_layers, cache.layers, strict=True):
        sa = layer.self_attn
        hd, dk = sa.h, sa.d_k
        r = layer.self_attn_residual
        h = _norm(r.norm, x) if pre else x
        w, b = sa._stacked_qkv()
        qkv = linear(h, w, b)  # (N, 3*h*dk)
        q, k, v = qkv.view(N, 3, hd, 1, dk).unbind(1)  # (N, h, 1, dk) each
        keys, values = lc.append(k, v)  # (N, h, t, dk)
        L = keys.size(2)
        s = torch.bmm(q.reshape(N * hd, 1, dk), keys.reshape(N * hd, L, dk).transpose(1, 2))
        p = torch.softmax(s.mul_(1 / math.sqrt(dk)), dim=-1)
        a = torch.bmm(p, values.reshape(N * hd, L, dk)).view(N, hd * dk)
        y = linear(a, sa.w_o.weight, sa.w_o.bias)
        x = x + y if pre else _norm(r.norm, x + y)
        ca = layer.cross_attn
        r = layer.cross_attn_residual
        h = _norm(r.norm, x) if pre else x
        q = linear(h, ca.w_q.weight, ca.w_q.bias)  # (N, h*dk)
        S = lc.cross_k.size(2)
        q = q.view(B, g, hd, dk).transpose(1, 2).reshape(B * hd, g, dk)
        s = torch.bmm(q, lc.cross_k.view(B * hd, S, dk).transpose(1, 2))  # (B*h, g, S)
        if mask_bias is None:
            mask_bias = torch.zeros(B, 1, 1, S).masked_fill_(
                ~cache.src_pad_mask[:, None, None, :], float("-inf")
            )
        s = s.mul_(1 / math.sqrt(dk)).view(B, hd, g, S).add_(mask_bias)
        p = torch.softmax(s, dim=-1).view(B * hd, g, S)
        a = (
            torch.bmm(p, lc.cross_v.view(B * hd, S, dk))
            .view(B, hd, g, dk)
            .transpose(1, 2)
            .reshape(N, hd * dk)
        )
        y = linear(a, ca.w_o.weight, ca.w_o.bias)
        x = x + y if pre else _norm(r.norm, x + y)
        r = layer.ffn_residual
        h = _norm(r.norm, x) if pre else x
        f = layer.ffn
        y = linear(torch.relu_(linear(h, f.w_1.weight, f.w_1.bias)), f.w_2.weight, f.w_2.bias)
        x = x + y if pre else _norm(r.norm, x + y)
    cache.length += 1
    if pre:
        x = _norm(model.decoder_norm, x)
    return linear(x, model.output_weight)


# --- compiled -------------------------------------------------------------------------------


def _layer(layer, x, keys, values, cross_k, cross_v, padding):
    """One pre-norm decoder layer for x (N, d_model); returns x and the keys and values with
    this position appended."""
    n_rows, n_sentences = x.size(0), cross_k.size(0)
    attention = layer.self_attn
    heads, d_k = attention.h, attention.d_k
    stacked = torch.cat([attention.w_q.weight, attention.w_k.weight, attention.w_v.weight])
    bias = torch.cat([attention.w_q.bias, attention.w_k.bias, attention.w_v.bias])
    h = _norm(layer.self_attn_residual.norm, x)
    q, k, v = F.linear(h, stacked, bias).view(n_rows, 3, heads, 1, d_k).unbind(1)
    keys, values = torch.cat([keys, k], dim=2), torch.cat([values, v], dim=2)
    scores = torch.matmul(q, keys.transpose(-1, -2)) * (1 / math.sqrt(d_k))
    a = torch.matmul(torch.softmax(scores, -1), values).reshape(n_rows, heads * d_k)
    x = x + F.linear(a, attention.w_o.weight, attention.w_o.bias)
    attention = layer.cross_attn
    h = _norm(layer.cross_attn_residual.norm, x)
    q = F.linear(h, attention.w_q.weight, attention.w_q.bias)
    q = q.view(n_sentences, -1, heads, d_k).transpose(1, 2)
    scores = torch.matmul(q, cross_k.transpose(-1, -2)) * (1 / math.sqrt(d_k)) + padding
    a = torch.matmul(torch.softmax(scores, -1), cross_v).transpose(1, 2).reshape(n_rows, -1)
    x = x + F.linear(a, attention.w_o.weight, attention.w_o.bias)
    ffn = layer.ffn
    h = _norm(layer.ffn_residual.norm, x)
    hidden = torch.relu(F.linear(h, ffn.w_1.weight, ffn.w_1.bias))
    return x + F.linear(hidden, ffn.w_2.weight, ffn.w_2.bias), keys, values


def compiled_step(model):
    embed = model.tgt_embed

    def graph(tokens, position, keys, values, cross_k, cross_v, padding):
        x = F.embedding(tokens, embed.tokens.weight) * embed.scale + position
        appended = []
        for i, layer in enumerate(model.decoder_layers):
            x, k, v = _layer(layer, x, keys[i], values[i], cross_k[i], cross_v[i], padding)
            appended.append((k, v))
        return F.linear(_norm(model.decoder_norm, x), embed.tokens.weight), appended

    compiled = torch.compile(graph, dynamic=True)

    def step(self, tokens, cache):
        layers = cache.layers
        if layers[0].keys is None:
            empty = [torch.zeros(tokens.size(0), a.h, 0, a.d_k) for a in _attentions(model)]
            keys = values = empty
        else:
            keys, values = [c.self_k for c in layers], [c.self_v for c in layers]
        real = cache.src_pad_mask[:, None, None, :]
        padding = torch.zeros(real.shape).masked_fill_(~real, float("-inf"))
        logits, appended = compiled(
            tokens.view(-1), embed.sinusoid[cache.length], keys, values,
            [c.cross_k for c in layers], [c.cross_v for c in layers], padding,
        )  # fmt: skip
        for layer_cache, (k, v) in zip(layers, appended, strict=True):
            layer_cache.keys, layer_cache.values, layer_cache.length = k, v, cache.length + 1
        cache.length += 1
        return logits

    return step


def _attentions(model):
    return [layer.self_attn for layer in model.decoder_layers]


def main() -> None:
    torch.set_num_threads(2)
    way, model_dir, data_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    batch, lines, rounds = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    data = PreparedData.load(data_dir)
    test = data.split("test")
    sources = [test.pair(i)[0].tolist() for i in range(lines)]
    model = Translator.load(model_dir, device="cpu").model
    step = {"written-out": lean_step, "compiled": compiled_step(model)}[way]
    ways = {"layers": model.step, way: types.MethodType(step, model)}
    decode = DecodeConfig(beam_size=4, alpha=0.6, max_len_b=50, batch_size=batch)
    cpu = torch.device("cpu")
    times = {name: [] for name in ways}
    digests = {}
    with torch.inference_mode() if way == "written-out" else torch.no_grad():
        if way == "compiled":
            model.step = ways[way]
            start = time.perf_counter()
            decode_ids(model, data.vocab, sources[: max(batch, 8)], decode, cpu)
            print(
                "compiling and a warm-up:", round(time.perf_counter() - start, 1), "s", flush=True
            )
        for _ in range(rounds):
            for name, each in ways.items():
                model.step = each
                start = time.perf_counter()
                found = decode_ids(model, data.vocab, sources, decode, cpu)
                times[name].append(round(time.perf_counter() - start, 3))
                digests[name] = hashlib.sha256(str([h[0].tokens for h in found]).encode())
    print(times, {name: digest.hexdigest()[:12] for name, digest in digests.items()})


if __name__ == "__main__":
    main()
