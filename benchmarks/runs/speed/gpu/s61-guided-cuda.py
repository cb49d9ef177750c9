"""Session 61's GPU check of guided decoding (~1 min): beam search with terms, an avoid list and
a prefix on CUDA gives the CPU's outputs, their scores within float32's rounding (the tests' tiny
float64 models, their four sentences; a first run compared scores to 9 decimals and differed),
and token ids past the vocabulary are refused by name there, not by a device-side assert.

    PYTHONPATH=. python benchmarks/runs/speed/gpu/s61-guided-cuda.py
"""

import torch

from tests.conftest import SENTENCES, SPECIALS, padded_sources, tiny_model, tiny_rnn
from transduce.decoding.search import beam_search, greedy_search

cuda, cpu = torch.device("cuda"), torch.device("cpu")
src = padded_sources(SENTENCES)
terms = [[[7, 9], [10]], [], [[5, 5, 6]], [[11]]]
avoid = [[4, 4], [6]]
prefixes = [[4], [], [8, 8], []]
for name, model in [("transformer", tiny_model(seed=6)), ("rnn", tiny_rnn(seed=6))]:
    for guides in (
        {"terms": terms},
        {"avoid": avoid},
        {"terms": terms, "avoid": avoid},
        {"prefixes": prefixes, "terms": terms},
    ):
        on = []
        for device in (cpu, cuda):
            found = beam_search(
                model.to(device),
                src.to(device),
                **SPECIALS,
                beam_size=4,
                n_best=2,
                max_len_b=6,
                **guides,
            )
            on.append([[(h.tokens, h.score, h.missing) for h in s] for s in found])
        tokens = [[[(t, m) for t, _, m in s] for s in found] for found in on]
        pairs = zip(*on, strict=True)
        gap = max(abs(a[1] - b[1]) for x, y in pairs for a, b in zip(x, y, strict=True))
        same = tokens[0] == tokens[1]
        print(name, sorted(guides), "cuda's outputs == cpu's:", same, f"scores within {gap:.1e}")
    greedy = [greedy_search(model.to(d), src.to(d), **SPECIALS, avoid=avoid) for d in (cpu, cuda)]
    print(name, "greedy avoid cuda == cpu:", greedy[0] == greedy[1])
    model = model.to(cuda)
    for guide, given in [("terms", [[[12]]] * 4), ("avoid", [[12]])]:
        try:
            beam_search(model, src.to(cuda), **SPECIALS, beam_size=2, max_len_b=3, **{guide: given})
            print(name, guide, "id 12: not refused (WRONG)")
        except ValueError as error:
            print(name, guide, "id 12 refused:", error)
    torch.cuda.synchronize()
print("no device-side assert")
