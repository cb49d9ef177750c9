"""Session 41 (throwaway, kept as the record): `transduce train` with EMAs of the weights.

Each EMA with decay d follows every update: shadow <- shadow + w (weights - shadow), with
w = max(1 - d, 1 / step) (the plain mean of the updates so far until step 1 / (1 - d)). At the
end each is written to RUN/ema-<d>.pt beside `average.pt`, so that one trajectory gives both
final models: a paired comparison that the host's speed does not bias.

    python benchmarks/runs/ema/ema_train.py 0.996,0.998 -- <transduce train arguments>
"""

import copy
import sys

import torch

from transduce.cli.main import main
from transduce.training import loop
from transduce.training.checkpoint import load, save

DECAYS = [float(d) for d in sys.argv[1].split(",")]
trainer_init, trainer_update, trainer_average = (
    loop.Trainer.__init__,
    loop.Trainer._update,
    loop.Trainer._average,
)


def init(self, *args, **kwargs):
    trainer_init(self, *args, **kwargs)
    # deepcopy keeps the tied embeddings tied: one shadow for the shared matrix
    self.ema = {d: copy.deepcopy(self.model).requires_grad_(False) for d in DECAYS}


def update(self, group, rate):
    result = trainer_update(self, group, rate)
    weights = [p.detach() for p in self.model.parameters()]
    with torch.no_grad():
        for decay, shadow in self.ema.items():
            w = max(1 - decay, 1 / self.progress.step)
            torch._foreach_lerp_(list(shadow.parameters()), weights, w)
    return result


def average(self):
    out = trainer_average(self)
    state = load(out)
    for decay, shadow in self.ema.items():
        ema_state = {**state, "model": shadow.state_dict(), "ema_decay": decay}
        save(ema_state, self.run_dir / f"ema-{decay}.pt")
    return out


loop.Trainer.__init__, loop.Trainer._update, loop.Trainer._average = init, update, average
main(["train", *sys.argv[3:]])
