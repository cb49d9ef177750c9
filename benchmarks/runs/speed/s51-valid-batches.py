"""Session 51: a validation's greedy decoding of the dev set in batches of 64 sentences (before)
against as many as a beam search of the decode settings holds (64 x beam 4 = 256, now),
alternated in one process, on a trained checkpoint.

    python benchmarks/runs/speed/s51-valid-batches.py PREPARED CHECKPOINT [ROUNDS]

Prints each round's seconds and dev BLEU both ways, and the dev loss's seconds beside them.
"""

import sys
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import torch

from transduce.data.dataset import PreparedData
from transduce.models.saved import load_model
from transduce.tasks import get_task
from transduce.training.validation import dev_loss, dev_score


def main() -> None:
    prepared, checkpoint = Path(sys.argv[1]), Path(sys.argv[2])
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    torch.set_num_threads(2)
    saved = load_model(checkpoint.parent.parent, checkpoint)
    model, config, data = saved.model, saved.config, PreparedData.load(prepared)
    task, cpu = get_task(config.task), torch.device("cpu")
    before = replace(config, decode=replace(config.decode, batch_size=64, beam_size=1))
    print(
        f"{checkpoint}: decode.batch_size {config.decode.batch_size}, "
        f"beam {config.decode.beam_size}, train.valid_beam {config.train.valid_beam}"
    )
    for r in range(1, rounds + 1):
        seconds = {}
        for label, settings in (("64 sentences", before), ("now", config)):
            start = time.perf_counter()
            score = dev_score(model, data, settings, cpu, task)
            seconds[label] = time.perf_counter() - start
            print(f"round {r}, {label}: {seconds[label]:.2f} s, dev BLEU {score:.2f}")
        start = time.perf_counter()
        dev_loss(model, data, config, cpu, nullcontext)
        print(
            f"round {r}: {seconds['64 sentences'] / seconds['now']:.2f}x; "
            f"the dev loss {time.perf_counter() - start:.2f} s"
        )


if __name__ == "__main__":
    main()
