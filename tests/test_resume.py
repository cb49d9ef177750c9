"""training/resume.py: update_groups, groups of `accumulate` batches epoch after epoch, and where
a resumed run goes on."""

from __future__ import annotations

from collections.abc import Iterator

from transduce.training.resume import Progress, update_groups


class _Epochs:
    """A stand-in for TrainingEpochs: epoch e has `n` batches named (e, i)."""

    def __init__(self, n: int):
        self.n = n

    def num_batches(self, epoch: int) -> int:
        return self.n

    def fingerprint(self, epoch: int) -> str:
        return f"epoch-{epoch}"

    def batches(self, epoch: int, start: int = 0) -> Iterator[tuple[int, int]]:
        for i in range(start, self.n):
            yield (epoch, i)


def _take(groups, n: int) -> list:
    return [next(groups) for _ in range(n)]


def test_groups_run_across_the_end_of_an_epoch_and_drop_no_batch():
    """5 batches an epoch in groups of 2: the fifth batch of epoch 0 shares its group with the
    first of epoch 1, so every batch of every epoch is trained on, in order."""
    progress = Progress()
    groups = _take(update_groups(_Epochs(5), progress, accumulate=2, max_epochs=0), 5)
    flat = [batch for group in groups for batch in group]
    assert all(len(group) == 2 for group in groups)
    assert flat == [(0, i) for i in range(5)] + [(1, i) for i in range(5)]
    assert (progress.epoch, progress.batch_in_epoch) == (1, 5)


def test_max_epochs_ends_the_groups_after_that_many_epochs():
    progress = Progress()
    groups = list(update_groups(_Epochs(3), progress, accumulate=1, max_epochs=2))
    assert [group[0] for group in groups] == [(e, i) for e in range(2) for i in range(3)]
    assert (progress.epoch, progress.batch_in_epoch) == (2, 0)


def test_a_resumed_progress_goes_on_from_its_batch():
    progress = Progress(epoch=1, batch_in_epoch=2, batches="epoch-1")
    groups = _take(update_groups(_Epochs(4), progress, accumulate=1, max_epochs=0), 3)
    assert [group[0] for group in groups] == [(1, 2), (1, 3), (2, 0)]
