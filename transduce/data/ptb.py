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
from pathlib import Path

from .trees import Tree, clean, read_mrg

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


def _nonempty(paths: list[Path], root: Path, split: str) -> list[Path]:
    if not paths:
        raise FileNotFoundError(f"{root}: no .mrg files for the {split} split")
    return paths
