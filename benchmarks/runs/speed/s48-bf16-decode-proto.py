"""Session 48 prototype: beam search's linear products in bfloat16 (AMX), timed against float32.

    python s48-bf16-decode-proto.py {fp32,bf16} MODEL PREPARED BATCH [LINES]   # PAD=32: pad rows

Not the project's code: `matmul.linear` is replaced for products without gradients, each weight
cast to bfloat16 once. Prints one JSON line (seconds of one round after a warm-up batch, and a
digest of the outputs).
"""

import hashlib
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

import transduce.models.matmul as matmul
from transduce.config import DecodeConfig
from transduce.data.dataset import PreparedData
from transduce.decoding.translate import Translator, decode_ids

FLOAT32_LINEAR = matmul.linear
PAD = int(os.environ.get("PAD", "0"))
low_weights: dict[int, torch.Tensor] = {}


def bf16_linear(x, weight, bias=None):
    if torch.is_grad_enabled() or x.dtype != torch.float32:
        return FLOAT32_LINEAR(x, weight, bias)
    low = low_weights.setdefault(id(weight), weight.to(torch.bfloat16))
    flat = x.reshape(-1, x.size(-1)).to(torch.bfloat16)
    rows = flat.size(0)
    if PAD:
        flat = F.pad(flat, (0, 0, 0, -rows % PAD))
    out = torch.mm(flat, low.t())[:rows].float()
    if bias is not None:
        out += bias
    return out.view(*x.shape[:-1], weight.size(0))


def route_through_bf16() -> None:
    """Every transduce module that imported `linear` by name gets the bfloat16 one."""
    for name, module in list(sys.modules.items()):
        if name.startswith("transduce") and getattr(module, "linear", None) is FLOAT32_LINEAR:
            module.linear = bf16_linear


def main() -> None:
    mode, model_dir, data_dir, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    lines = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    torch.set_num_threads(2)
    if mode == "bf16":
        route_through_bf16()
    data = PreparedData.load(data_dir)
    test = data.split("test")
    sources = [test.pair(i)[0].tolist() for i in range(lines or len(test))]
    model = Translator.load(model_dir, device="cpu").model
    decode = DecodeConfig(beam_size=4, alpha=0.6, max_len_b=50, batch_size=batch)
    cpu = torch.device("cpu")
    with torch.inference_mode():
        decode_ids(model, data.vocab, sources[:batch], decode, cpu)  # warm-up
        start = time.perf_counter()
        hypotheses = decode_ids(model, data.vocab, sources, decode, cpu)
        seconds = time.perf_counter() - start
    digest = hashlib.sha256(str([h[0].tokens for h in hypotheses]).encode()).hexdigest()[:10]
    print(json.dumps({"mode": mode, "pad": PAD, "batch": batch, "seconds": round(seconds, 2),
                      "digest": digest}))  # fmt: skip


if __name__ == "__main__":
    main()
