"""The Penn Treebank WSJ corpus for English constituency parsing (s6.3), split and cleaned.

Two layouts under a data directory DIR:

- the full WSJ treebank, `DIR/wsj/SS/wsj_SSNN.mrg`, split as in the paper (and Vinyals et
  al. 2015): sections 02-21 train, 22 dev, 23 test;
- the NLTK sample, `DIR/ptb_sample/combined/wsj_NNNN.mrg`, which has no standard split.
  Ours is fixed by file number: 0001-0139 train, 0140-0159 dev, 0160-0179 test (3,068 /
  328 / 273 sentences in the copy of files 0001-0179 we use). Files numbered above 0179,
  present in some NLTK copies, are left out so that the split does not depend on the copy.

Each split is a list of trees cleaned by `trees.clean`: no wrapper, no empty elements, no
function tags.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from ..config import TaskConfig
from .corpus import LengthFilter
from .dataset import PreparedData, prepare
from .linearize import linearize
from .trees import Tree, clean, read_mrg, to_string

logger = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")
WSJ_SECTIONS = {"train": range(2, 22), "dev": range(22, 23), "test": range(23, 24)}
SAMPLE_FILES = {"train": range(1, 140), "dev": range(140, 160), "test": range(160, 180)}


def read_trees(paths: list[Path]) -> list[Tree]:
    """The cleaned trees of `paths`, in order; trees made only of empty elements are dropped."""
    trees = []
    for path in paths:
        for raw in read_mrg(path):
            tree = clean(raw)
            if tree is not None:
                trees.append(tree)
    return trees


def wsj_files(data_dir: str | Path, split: str) -> list[Path]:
    """The .mrg files of one split of the full treebank, `DIR/wsj/SS/wsj_SSNN.mrg`."""
    root = Path(data_dir) / "wsj"
    paths = []
    for section in WSJ_SECTIONS[split]:
        paths.extend(sorted((root / f"{section:02d}").glob(f"wsj_{section:02d}[0-9][0-9].mrg")))
    return _nonempty(paths, root, split)


def sample_files(data_dir: str | Path, split: str) -> list[Path]:
    """The .mrg files of one split of the NLTK sample, `DIR/ptb_sample/combined/`."""
    root = Path(data_dir) / "ptb_sample" / "combined"
    numbers = SAMPLE_FILES[split]
    paths = [root / f"wsj_{number:04d}.mrg" for number in numbers]
    return _nonempty([path for path in paths if path.is_file()], root, split)


def read_wsj(data_dir: str | Path) -> dict[str, list[Tree]]:
    """Train/dev/test trees of the full WSJ treebank (sections 02-21 / 22 / 23)."""
    return {split: read_trees(wsj_files(data_dir, split)) for split in SPLITS}


def read_sample(data_dir: str | Path) -> dict[str, list[Tree]]:
    """Train/dev/test trees of the NLTK sample, split by file number (module docstring)."""
    return {split: read_trees(sample_files(data_dir, split)) for split in SPLITS}


def read_treebank(data_dir: str | Path) -> dict[str, list[Tree]]:
    """The full WSJ treebank if `DIR/wsj` exists, else the NLTK sample in `DIR/ptb_sample`.

    Raises:
        FileNotFoundError: neither layout is there.
    """
    data_dir = Path(data_dir)
    if (data_dir / "wsj").is_dir():
        logger.info("reading the full WSJ treebank from %s", data_dir / "wsj")
        return read_wsj(data_dir)
    if (data_dir / "ptb_sample").is_dir():
        logger.info("reading the NLTK treebank sample from %s", data_dir / "ptb_sample")
        return read_sample(data_dir)
    raise FileNotFoundError(f"{data_dir}: has neither wsj/ nor ptb_sample/")


def prepare_treebank(
    data_dir: str | Path,
    out: str | Path,
    *,
    tags: bool = False,
    vocab_size: int = 16000,
    train_fraction: float = 1.0,
    force: bool = False,
) -> PreparedData:
    """The treebank as a prepared dataset for the parsing task (s6.3).

    The source of each pair is the sentence's words, the target its linearised tree
    (linearize.py); every bracket and tag token stays one subword of the joint vocabulary.
    The gold trees are kept beside (`{split}.trees.txt`): the task scores against them.
    `tags=False` (the default) writes `XX` for every POS tag, as Vinyals et al. and the paper:
    EVALB scores brackets, and with predicted tags a word the model tags as punctuation is
    deleted from its output alone, which makes the sentence an error sentence that EVALB
    leaves out; the gold tags are put back before scoring instead.
    `train_fraction` keeps the first part of the training trees, for learning curves.
    The paper's WSJ-only model used a vocabulary of 16K tokens.
    """
    if not 0.0 < train_fraction <= 1.0:
        raise ValueError(f"train_fraction must be in (0, 1], got {train_fraction}")
    trees = read_treebank(data_dir)
    trees["train"] = trees["train"][: max(1, round(len(trees["train"]) * train_fraction))]
    symbols = sorted({token for tree in trees["train"] for token in linearize(tree, tags)})
    with tempfile.TemporaryDirectory() as folder:
        splits, gold = _write_pairs(trees, Path(folder), tags)
        return prepare(
            splits,
            Path(out),
            vocab_size=vocab_size,
            # a linearised tree has about 3-4 tokens a word: keep long sentences in training
            length_filter=LengthFilter(max_len=1000, max_len_ratio=20.0),
            description={"corpus": "ptb", "tags": tags, "train_fraction": train_fraction},
            task=TaskConfig(name="parse", tags=tags),
            whole_tokens=symbols,
            extra_files=gold,
            force=force,
        )


def _write_pairs(
    trees: dict[str, list[Tree]], folder: Path, tags: bool
) -> tuple[dict[str, tuple[Path, Path]], dict[str, Path]]:
    """Words, linearised trees and gold trees of each split, one per line, under `folder`."""
    splits, gold = {}, {}
    for split, items in trees.items():
        paths = [folder / f"{split}.{kind}" for kind in ("words", "linear", "trees")]
        paths[0].write_text("".join(" ".join(t.leaves()) + "\n" for t in items), encoding="utf-8")
        paths[1].write_text(
            "".join(" ".join(linearize(t, tags)) + "\n" for t in items), encoding="utf-8"
        )
        paths[2].write_text("".join(to_string(t) + "\n" for t in items), encoding="utf-8")
        splits[split], gold[f"{split}.trees.txt"] = (paths[0], paths[1]), paths[2]
    return splits, gold


def _nonempty(paths: list[Path], root: Path, split: str) -> list[Path]:
    if not paths:
        raise FileNotFoundError(f"{root}: no .mrg files for the {split} split")
    return paths
