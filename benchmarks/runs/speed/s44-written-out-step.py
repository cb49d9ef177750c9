"""Session 44 (issue 17): beam search's step written out over (rows, d_model) tensors (no module
calls, the source mask added once a step) against `Transformer.step` through the layers, in one
process, alternating; the same outputs asserted by digest. Not kept: see SPEED.md, session 44.

    python benchmarks/runs/speed/s44-written-out-step.py RUN PREPARED BATCH LINES ROUNDS
"""

import hashlib
import math
import sys
import time
import types

import torch
import torch.nn.functional as F

from transduce.config import DecodeConfig
from transduce.data.dataset import PreparedData
from transduce.decoding.translate import Translator, decode_ids
from transduce.models.matmul import linear


def _ln(norm, x):
    return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)


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
        h = _ln(r.norm, x) if pre else x
        w, b = sa._stacked_qkv()
        qkv = linear(h, w, b)  # (N, 3*h*dk)
        q, k, v = qkv.view(N, 3, hd, 1, dk).unbind(1)  # (N, h, 1, dk) each
        keys, values = lc.append(k, v)  # (N, h, t, dk)
        L = keys.size(2)
        s = torch.bmm(q.reshape(N * hd, 1, dk), keys.reshape(N * hd, L, dk).transpose(1, 2))
        p = torch.softmax(s.mul_(1 / math.sqrt(dk)), dim=-1)
        a = torch.bmm(p, values.reshape(N * hd, L, dk)).view(N, hd * dk)
        y = linear(a, sa.w_o.weight, sa.w_o.bias)
        x = x + y if pre else _ln(r.norm, x + y)
        ca = layer.cross_attn
        r = layer.cross_attn_residual
        h = _ln(r.norm, x) if pre else x
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
        x = x + y if pre else _ln(r.norm, x + y)
        r = layer.ffn_residual
        h = _ln(r.norm, x) if pre else x
        f = layer.ffn
        y = linear(torch.relu_(linear(h, f.w_1.weight, f.w_1.bias)), f.w_2.weight, f.w_2.bias)
        x = x + y if pre else _ln(r.norm, x + y)
    cache.length += 1
    if pre:
        x = _ln(model.decoder_norm, x)
    return linear(x, model.output_weight)


def main() -> None:
    torch.set_num_threads(2)
    model_dir, data_dir = sys.argv[1], sys.argv[2]
    batch, lines, rounds = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    data = PreparedData.load(data_dir)
    test = data.split("test")
    sources = [test.pair(i)[0].tolist() for i in range(lines)]
    model = Translator.load(model_dir, device="cpu").model
    ways = {"layers": model.step, "written out": types.MethodType(lean_step, model)}
    decode = DecodeConfig(beam_size=4, alpha=0.6, max_len_b=50, batch_size=batch)
    cpu = torch.device("cpu")
    times = {name: [] for name in ways}
    digests = {}
    with torch.inference_mode():
        for _ in range(rounds):
            for name, step in ways.items():
                model.step = step
                start = time.perf_counter()
                found = decode_ids(model, data.vocab, sources, decode, cpu)
                times[name].append(round(time.perf_counter() - start, 3))
                digests[name] = hashlib.sha256(str([h[0].tokens for h in found]).encode())
    print(times, {name: digest.hexdigest()[:12] for name, digest in digests.items()})


if __name__ == "__main__":
    main()
