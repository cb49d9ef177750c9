"""Bidirectional training (Ding et al. 2021, "Improving Neural Machine Translation by
Bidirectional Training"): the first part of a run trains on each pair both ways, source ->
target and target -> source, with one model and the joint vocabulary; the rest on source ->
target alone. The reversed pairs cost nothing to make and add no parameters: a small model on a
small corpus meets twice the examples early on, and learns each language as input and output.

`train.both_ways` is the share of the budget (steps, epochs or minutes, whichever ends the run)
in which an epoch may begin both ways. Each epoch's way is decided as it begins and kept in the
run's progress, so a run resumed mid-epoch finishes that epoch the way it began it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..data.epochs import TrainingEpochs
from .resume import Progress

logger = logging.getLogger(__name__)


class BothWays:
    """Decides, as each epoch begins, whether it sees the pairs both ways (`starting`)."""

    def __init__(
        self,
        share: float,
        progress: Progress,
        epochs: TrainingEpochs,
        budget_used: Callable[[], float],
    ) -> None:
        self.share, self.progress, self.epochs = share, progress, epochs
        self.budget_used = budget_used

    def starting(self, epoch: int) -> None:
        """Epoch `epoch` begins (or resumes): both ways if every epoch before it was and the
        budget spent is under the share; the epochs' batches follow."""
        progress = self.progress
        begins = progress.batch_in_epoch == 0 and progress.both_ways_epochs == epoch
        if self.share and begins:
            if self.budget_used() < self.share:
                progress.both_ways_epochs = epoch + 1
            elif epoch > 0:
                logger.info("epoch %d on: the pairs one way only (train.both_ways)", epoch)
        self.epochs.both_ways_epochs = progress.both_ways_epochs
