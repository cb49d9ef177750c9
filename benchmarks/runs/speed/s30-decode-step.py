"""Where a beam-search step's time goes (issue 17, target 4; SPEED.md, session 30).

    python benchmarks/runs/speed/s30-decode-step.py --model RUN --prepared DATA \
        --batch 64 --lines 256 [--shapes]        # or --batch 1 --lines 40

Decodes the first `--lines` test sentences (beam 4, alpha 0.6, +50, as speed_decode.py) once to
warm up, once plain (the wall time), and once under torch.profiler: prints the wall times, the
operators by self time and, with `--shapes`, the products by shape. Then the same decode under
cProfile: the Python functions by cumulative time (the model's step against the search's own
bookkeeping).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import torch
from torch.profiler import ProfilerActivity, profile

from transduce.config import DecodeConfig
from transduce.data.dataset import PreparedData
from transduce.decoding.translate import Translator, decode_ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prepared", required=True)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lines", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--shapes", action="store_true", help="group the operators by shape")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    data = PreparedData.load(args.prepared)
    test = data.split("test")
    sources = [test.pair(i)[0].tolist() for i in range(min(args.lines, len(test)))]
    model = Translator.load(args.model, device="cpu").model
    decode = DecodeConfig(beam_size=4, alpha=0.6, max_len_b=50, batch_size=args.batch)

    def run() -> float:
        start = time.perf_counter()
        decode_ids(model, data.vocab, sources, decode, torch.device("cpu"))
        return time.perf_counter() - start

    with torch.inference_mode():
        run()  # warm-up: the weights packed, oneDNN's products made
        print(f"plain: {run():.3f} s")
        with profile(activities=[ProfilerActivity.CPU], record_shapes=args.shapes) as trace:
            print(f"under torch.profiler: {run():.3f} s")
        averages = trace.key_averages(group_by_input_shape=args.shapes)
        print(averages.table(sort_by="self_cpu_time_total", row_limit=30))
        python = cProfile.Profile()
        python.enable()
        run()
        python.disable()
    pstats.Stats(python).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
