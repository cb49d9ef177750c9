"""A step of `small` (random weights) at 4 rows: layers vs plan, alternated, one thread."""
import sys, time, statistics, torch
from transduce import presets
from transduce.models.transformer import Transformer
from transduce.models import matmul
torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
config = presets.small().model
import dataclasses
config = dataclasses.replace(config, vocab_size=8000)
torch.manual_seed(0)
model = Transformer(config).eval()
src = torch.randint(4, 8000, (1, 14)); src[0, -1] = 3
def run(plan: bool, steps=20):
    model.written_out_steps = plan
    with torch.inference_mode(), matmul.packed_for_inference(keep):
        cache = model.init_cache(model.encode(src), 1)
        model.step(torch.full((1, 1), 2), cache)
        cache.reorder(torch.zeros(4, dtype=torch.long), group=4)
        tok = torch.full((4, 1), 5)
        start = time.perf_counter()
        for t in range(steps):
            out = model.step(tok, cache)
            cache.reorder(torch.tensor([1, 0, 3, 2]))
        return (time.perf_counter() - start) / steps * 1e3
keep = {}
times = {True: [], False: []}
for r in range(30):
    for plan in (False, True):
        times[plan].append(run(plan))
for plan in (False, True):
    print("plan" if plan else "layers", "median ms/step %.3f  min %.3f" % (statistics.median(times[plan]), min(times[plan])))
print("ratio %.3f" % (statistics.median(times[False]) / statistics.median(times[True])))
