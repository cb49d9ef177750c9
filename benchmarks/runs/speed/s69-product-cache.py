"""Session 69: decoding with oneDNN's product caches at 8 entries (training's) against 32
(`matmul.DECODING_CACHED_PRODUCTS`, what `translate` and `serve` now set). The libraries read
the setting once, at a process's first product, so every timing is a fresh process, the sizes
alternated round by round. Prints one JSON line a timing: the decoding's seconds (the model's
load left out), the process's peak resident memory and a digest of the outputs.

    python benchmarks/runs/speed/s69-product-cache.py RUN DATA BATCH LINES WORKERS ROUNDS SIZE...

`ONEDNN_VERBOSE=2` in the environment counts the compilations instead (`create:cache_miss`).
"""

import hashlib
import json
import os
import resource
import subprocess
import sys
import time


def one_timing(run: str, prepared: str, batch: int, lines: int, workers: int) -> dict:
    import torch

    from transduce.config import DecodeConfig
    from transduce.data.dataset import PreparedData
    from transduce.decoding.translate import Translator, decode_ids

    torch.set_num_threads(2)
    data = PreparedData.load(prepared)
    test = data.split("test")
    sources = [test.pair(i)[0].tolist() for i in range(min(lines, len(test)))]
    model = Translator.load(run, device="cpu").model
    decode = DecodeConfig(beam_size=4, alpha=0.6, max_len_b=50, batch_size=batch, workers=workers)
    with torch.inference_mode():
        start = time.perf_counter()
        found = decode_ids(model, data.vocab, sources, decode, torch.device("cpu"))
        seconds = time.perf_counter() - start
    outputs = str([hypotheses[0].tokens for hypotheses in found]).encode()
    return {
        "cache": os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"],
        "batch": batch,
        "workers": workers,
        "seconds": round(seconds, 3),
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
        "outputs": hashlib.md5(outputs).hexdigest()[:8],
    }


def main() -> None:
    if sys.argv[1] == "--one":
        run, prepared, batch, lines, workers = sys.argv[2:7]
        print(json.dumps(one_timing(run, prepared, int(batch), int(lines), int(workers))))
        return
    run, prepared, batch, lines, workers, rounds, *sizes = sys.argv[1:]
    for _ in range(int(rounds)):
        for size in sizes:
            env = {**os.environ, "ONEDNN_PRIMITIVE_CACHE_CAPACITY": size,
                   "LRU_CACHE_CAPACITY": size, "OMP_NUM_THREADS": "2"}  # fmt: skip
            command = [sys.executable, __file__, "--one", run, prepared, batch, lines, workers]
            subprocess.run(command, env=env, check=True)


if __name__ == "__main__":
    main()
