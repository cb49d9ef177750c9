"""Session 70: a decoding step of `small` (random weights) at four rows (a sentence at a time,
beam 4), the layers' step against the written-out one (`models/step_plan.py`), alternated in one
process, one thread by default.

    python benchmarks/runs/speed/s70-step-ab.py [THREADS]
"""

import dataclasses
import statistics
import sys
import time

import torch

from transduce import presets
from transduce.models import matmul
from transduce.models.transformer import Transformer

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
config = dataclasses.replace(presets.small().model, vocab_size=8000)
torch.manual_seed(0)
model = Transformer(config).eval()
src = torch.randint(4, 8000, (1, 14))
src[0, -1] = 3
packed = {}


def ms_per_step(written_out: bool, steps: int = 20) -> float:
    model.written_out_steps = written_out
    with torch.inference_mode(), matmul.packed_for_inference(packed):
        cache = model.init_cache(model.encode(src), 1)
        model.step(torch.full((1, 1), 2), cache)
        cache.reorder(torch.zeros(4, dtype=torch.long), group=4)
        tokens = torch.full((4, 1), 5)
        start = time.perf_counter()
        for _ in range(steps):
            model.step(tokens, cache)
            cache.reorder(torch.tensor([1, 0, 3, 2]))
        return (time.perf_counter() - start) / steps * 1e3


times = {False: [], True: []}
for _ in range(30):
    for written_out in (False, True):
        times[written_out].append(ms_per_step(written_out))
for written_out, label in ((False, "layers"), (True, "written out")):
    median, fastest = statistics.median(times[written_out]), min(times[written_out])
    print(f"{label}: median {median:.3f} ms a step, fastest {fastest:.3f}")
print(f"ratio {statistics.median(times[False]) / statistics.median(times[True]):.3f}")
