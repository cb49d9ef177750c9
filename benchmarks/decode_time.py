"""transduce's beam search alone, timed on a prepared test set: the A/B of a decoding change.

    python benchmarks/decode_time.py --model RUN --prepared DATA [--threads 2] [--rounds 2]
        [--batch 64] [--beam 4] [--lines N]
    PYTHONPATH=/path/to/other/checkout python benchmarks/decode_time.py ...   # the other code

Beam 4 (`--beam 1`: greedy, as validation decodes), alpha 0.6, at most source length + 50, as
`speed_decode.py`, without the peers and their exports, so that two checkouts can be alternated
quickly. Prints one JSON line: the code's path,
seconds per round, and a digest of the outputs (an exact change keeps it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time

import torch

import transduce
from transduce.config import DecodeConfig
from transduce.data.dataset import PreparedData
from transduce.decoding.translate import Translator, decode_ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prepared", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--beam", type=int, default=4, help="1: greedy")
    parser.add_argument("--lines", type=int, default=0, help="the first N test lines (0: all)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    data = PreparedData.load(args.prepared)
    test = data.split("test")
    lines = args.lines or len(test)
    sources = [test.pair(i)[0].tolist() for i in range(min(lines, len(test)))]
    model = Translator.load(args.model, device="cpu").model
    decode = DecodeConfig(beam_size=args.beam, alpha=0.6, max_len_b=50, batch_size=args.batch)
    cpu = torch.device("cpu")
    seconds = []
    with torch.inference_mode():
        decode_ids(model, data.vocab, sources[: args.batch], decode, cpu)  # warm-up
        for _ in range(args.rounds):
            start = time.perf_counter()
            hypotheses = decode_ids(model, data.vocab, sources, decode, cpu)
            seconds.append(round(time.perf_counter() - start, 3))
    outputs = str([h[0].tokens for h in hypotheses]).encode()
    digest = hashlib.sha256(outputs).hexdigest()[:12]
    print(json.dumps({"code": transduce.__file__, "seconds": seconds, "outputs": digest}))


if __name__ == "__main__":
    main()
