"""English constituency parsing as sequence transduction (s6.3, after Vinyals et al. 2015).

The model reads the words and writes the linearised tree (data/linearize.py); decoded output is
repaired into a tree over exactly the input's words, then scored by EVALB's rules with
COLLINS.prm (evalb.py): labelled bracket F1, the number the paper's Table 4 reports.
"""

from __future__ import annotations

import logging
import math
import re

from ..config import DecodeConfig, TaskConfig
from ..data.dataset import PreparedData
from ..data.linearize import PLACEHOLDER, linearize, restore
from ..data.trees import Tree, clean, parse_tree, to_string
from .evalb import COLLINS, evalb
from .evalb_report import format_summary
from .metrics import Score

logger = logging.getLogger(__name__)


class Parsing:
    metric = "f1"
    higher_is_better = True

    def __init__(self, config: TaskConfig):
        self.config = config
        self.repaired = 0  # outputs `postprocess` had to repair, in its last call

    def decode_defaults(self) -> DecodeConfig:
        """s6.3: beam 21, length penalty 0.3, at most input length + 300 tokens."""
        return DecodeConfig(beam_size=21, alpha=0.3, max_len_a=1.0, max_len_b=300)

    def postprocess(self, outputs: list[str], sources: list[str]) -> list[str]:
        """Each decoded token sequence as a well-formed one-line tree over its source's words."""
        trees, self.repaired = restore_all(outputs, sources, self.config.tags)
        if self.repaired:
            logger.info("repaired %d of %d parses into trees", self.repaired, len(outputs))
        return [to_string(tree) for tree in trees]

    def targets(self, outputs: list[str], sources: list[str]) -> list[str]:
        """Each bracketed tree (a parser's or a treebank's) as the tokens the model writes for
        it: cleaned as the training trees were (`data/trees.clean`), then linearised."""
        linear = []
        for number, (output, source) in enumerate(zip(outputs, sources, strict=True), start=1):
            tree = clean(parse_tree(output, f"target line {number}"))
            words = [] if tree is None else tree.leaves()
            if tree is None or words != source.split():
                raise ValueError(
                    f"target line {number}: a tree over {' '.join(words)!r}, but its sentence is "
                    f"{source.strip()!r}"
                )
            linear.append(" ".join(linearize(tree, self.config.tags)))
        return linear

    def references(self, data: PreparedData, split: str) -> list[str]:
        path = data.path / f"{split}.trees.txt"
        return path.read_text(encoding="utf-8").splitlines()

    def score(self, hypotheses: list[str], references: list[str]) -> Score:
        """EVALB's bracketing F-measure over all sentences with the gold POS tags put back: what
        ranks checkpoints and settings. With predicted tags EVALB drops every sentence whose
        punctuation tags differ from the gold ones (an "error sentence"), so its own F1 covers
        a subset that changes from one checkpoint to the next and cannot rank them."""
        result = evalb(references, hypotheses, COLLINS, gold_tags=True)
        tags = "tags:predicted, scored with gold" if self.config.tags else "tags:gold"
        return Score("F1", _fmeasure(result), f"EVALB|COLLINS.prm|{tags}", format_summary(result))

    def report(self, hypotheses: list[str], references: list[str]) -> list[Score]:
        """EVALB exactly as the standard program with COLLINS.prm scores these trees (with the
        gold tags put back only where the outputs carry placeholders)."""
        if not self.config.tags:
            return [self.score(hypotheses, references)]
        result = evalb(references, hypotheses, COLLINS)
        signature = "EVALB|COLLINS.prm|tags:predicted"
        return [Score("F1", _fmeasure(result), signature, format_summary(result))]


def _fmeasure(result) -> float:
    # EVALB prints -nan when no bracket matched (0/0); as a number to rank by, that is 0.
    return 0.0 if math.isnan(result.all.fmeasure) else result.all.fmeasure


def carries_placeholders(trees: list[str]) -> bool:
    """Whether every preterminal of these one-line trees is the placeholder `XX` (tags=False)."""
    labels = [label for tree in trees for label in _PRETERMINAL.findall(tree)]
    return bool(labels) and all(label == PLACEHOLDER for label in labels)


_PRETERMINAL = re.compile(r"\(([^\s()]+) [^\s()]+\)")  # (TAG word)


def restore_all(outputs: list[str], sources: list[str], tags: bool) -> tuple[list[Tree], int]:
    """Trees from decoded outputs (one per source sentence), and how many needed repair."""
    trees, repaired = [], 0
    for output, source in zip(outputs, sources, strict=True):
        tree, was_repaired = restore(output.split(), source.split(), tags=tags)
        trees.append(tree)
        repaired += was_repaired
    return trees, repaired
