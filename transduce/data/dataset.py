"""The prepared dataset on disk: joint BPE trained, every split encoded, training pairs filtered.

`prepare` does the work once and stores it in a folder; a second call with the same inputs and
options finds the fingerprint in `meta.json` and loads instead. Layout of the folder:

    vocab.model, vocab.vocab     the joint sentencepiece model (bpe.py); a given one: .model only
    {split}.npz                  int32 ids of each side, flat, with int64 offsets (n + 1 of them),
                                 and `index`, the line number each pair came from
    {split}.src.txt / .tgt.txt   dev/test text exactly as read (references, translation input)
    meta.json                    description, sizes, line counts, filter report, fingerprint
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import itertools
import json
import logging
import os
import shutil
import tempfile
import time
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sentencepiece

from ..config import TaskConfig
from ..files import waiting_turn
from .bpe import Vocab, train_joint
from .corpus import DataError, LengthFilter, ParallelText, filter_pairs, read_parallel
from .given_vocab import adopt, check_special_ids

logger = logging.getLogger(__name__)

FORMAT = 1  # bump when the layout changes, so old folders are rebuilt rather than misread


@dataclass(frozen=True)
class EncodedSplit:
    """One split as subword ids without bos/eos: pair i is `src_ids[src_offsets[i]:...[i+1]]`."""

    src_ids: np.ndarray  # (total src tokens,) int32
    src_offsets: np.ndarray  # (n + 1,) int64
    tgt_ids: np.ndarray
    tgt_offsets: np.ndarray
    index: np.ndarray  # (n,) the line of the original file each pair came from

    @classmethod
    def load(cls, path: Path) -> EncodedSplit:
        try:
            with np.load(path) as arrays:
                return cls(**{f.name: arrays[f.name] for f in dataclasses.fields(cls)})
        # empty: EOFError; cut short or damaged: BadZipFile; not an archive: ValueError
        except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as error:
            raise DataError(f"{path}: not an encoded split ({error})") from error

    @classmethod
    def from_sequences(
        cls, src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]], index: np.ndarray
    ) -> EncodedSplit:
        """A split of pair i = (src[i], tgt[i]), from line `index[i]` of the original files."""
        if not len(src) == len(tgt) == len(index):
            raise ValueError(f"{len(src)} sources, {len(tgt)} targets and {len(index)} lines")
        src_ids, src_offsets = _flatten(src)
        tgt_ids, tgt_offsets = _flatten(tgt)
        index = np.asarray(index, dtype=np.int64)
        return cls(src_ids, src_offsets, tgt_ids, tgt_offsets, index)

    def save(self, path: Path) -> None:
        np.savez(path, **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)})

    def __len__(self) -> int:
        return len(self.index)

    @property
    def src_lengths(self) -> np.ndarray:
        return np.diff(self.src_offsets)

    @property
    def tgt_lengths(self) -> np.ndarray:
        return np.diff(self.tgt_offsets)

    def pair(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        src = self.src_ids[self.src_offsets[i] : self.src_offsets[i + 1]]
        return src, self.tgt_ids[self.tgt_offsets[i] : self.tgt_offsets[i + 1]]

    __getitem__ = pair

    def pairs(self, indices: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
        """The pairs of one batch, ready for `batching.collate`."""
        return [self.pair(i) for i in indices]

    def both_ways(self) -> EncodedSplit:
        """The pairs, then each pair reversed (target -> source), from the same lines: the data
        of bidirectional training (`train.both_ways`). The vocabulary is joint, so a reversed
        pair is encoded as it stands."""
        return EncodedSplit(
            np.concatenate([self.src_ids, self.tgt_ids]),
            np.concatenate([self.src_offsets, self.src_offsets[-1] + self.tgt_offsets[1:]]),
            np.concatenate([self.tgt_ids, self.src_ids]),
            np.concatenate([self.tgt_offsets, self.tgt_offsets[-1] + self.src_offsets[1:]]),
            np.concatenate([self.index, self.index]),
        )


class PreparedData:
    """A folder written by `prepare`: the vocabulary, encoded splits and dev/test text."""

    def __init__(self, path: Path, meta: dict, vocab: Vocab) -> None:
        self.path, self.meta, self.vocab = path, meta, vocab
        self._splits: dict[str, EncodedSplit] = {}

    @classmethod
    def load(cls, path: Path | str) -> PreparedData:
        path = Path(path)
        try:
            meta = json.loads((path / "meta.json").read_text())
        except (OSError, ValueError) as error:
            raise DataError(f"{path}: not a prepared dataset (no readable meta.json)") from error
        if meta.get("format") != FORMAT:
            raise DataError(f"{path}: prepared with format {meta.get('format')}, need {FORMAT}")
        return cls(path, meta, Vocab.load(path / "vocab.model"))

    @property
    def splits(self) -> list[str]:
        return list(self.meta["splits"])

    def split(self, name: str) -> EncodedSplit:
        self._check(name)
        if name not in self._splits:
            self._splits[name] = EncodedSplit.load(self.path / f"{name}.npz")
        return self._splits[name]

    @property
    def task(self) -> TaskConfig:
        """The task recorded by `prepare`; folders from before tasks were recorded are
        translation, scored lowercased on tokens when their variant was `tok`."""
        if "task" in self.meta:
            return TaskConfig(**self.meta["task"])
        if self.meta.get("description", {}).get("variant") == "tok":
            return TaskConfig(tokenize="none", lowercase=True)
        return TaskConfig()

    def text(self, name: str) -> ParallelText:
        """The unfiltered text of a dev/test split (training text is not kept)."""
        self._check(name)
        if name == "train":
            raise DataError(f"{self.path}: the text of the train split is not kept; use split()")
        return read_parallel(self.path / f"{name}.src.txt", self.path / f"{name}.tgt.txt")

    def _check(self, name: str) -> None:
        if name not in self.meta["splits"]:
            raise DataError(f"{self.path}: no split {name!r}; it has {', '.join(self.splits)}")


def prepare(
    splits: dict[str, tuple[Path, Path]],
    out: Path,
    *,
    vocab_size: int | None = None,
    length_filter: LengthFilter,
    description: dict,
    task: TaskConfig | None = None,
    character_coverage: float = 1.0,
    whole_tokens: Sequence[str] = (),
    extra_files: Mapping[str, Path] | None = None,
    vocab: Vocab | None = None,
    force: bool = False,
) -> PreparedData:
    """Train the joint BPE on train src+tgt, encode every split, filter train, and save to `out`.

    `splits` maps names ("train" required, e.g. "dev", "test") to (src file, tgt file), as
    `corpus.corpus_files` returns. Reuses `out` when it was prepared from the same file contents
    and options, unless `force`. Writes go to a temporary folder that is renamed at the end;
    a second prepare of the same `out` in another process waits for the first to finish.
    `task` (default: translation scored by sacreBLEU's defaults) is recorded for training.
    `whole_tokens` stay one subword each (bpe.train_joint); `extra_files` are copied into the
    folder under the given names (e.g. the gold trees a parsing task scores against).
    `vocab`, a trained model's vocabulary, is used as it is instead of training one of
    `vocab_size`, so that the model can be fine-tuned on the data (`train --init`).
    """
    if "train" not in splits:
        raise DataError(f"prepare needs a train split; got {', '.join(splits) or 'none'}")
    out = Path(out)
    extras = {name: Path(path) for name, path in (extra_files or {}).items()}
    options = {
        "vocab_size": vocab_size,
        "length_filter": dataclasses.asdict(length_filter),
        "character_coverage": character_coverage,
        "description": description,
        "task": dataclasses.asdict(task or TaskConfig()),
    } | _optional_inputs(whole_tokens, extras)
    if vocab is not None:  # its pieces are an input, as the files are; no BPE is trained
        check_special_ids(vocab)
        options |= {"vocab_size": vocab.size, "vocab": hashlib.sha256(vocab.serialized).hexdigest()}
        del options["character_coverage"]
    elif vocab_size is None:
        raise DataError("prepare needs vocab_size, the BPE's size to train, or a vocab to use")
    fingerprint = _fingerprint(splits, options)
    if not force and _stored_fingerprint(out) == fingerprint:
        return _reuse(out)
    _check_replaceable(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # One prepare of `out` at a time: a second would delete the first's half-built folder as a
    # killed prepare's leftover. It waits, and then finds the first's dataset.
    with waiting_turn(out.parent / f".{out.name}.lock", f"prepare of {out}"):
        if not force and _stored_fingerprint(out) == fingerprint:  # made while this one waited
            return _reuse(out)
        _remove_leftovers(out)
        _build_in_place(splits, out, options, fingerprint, length_filter, extras, vocab)
    return PreparedData.load(out)


def _reuse(out: Path) -> PreparedData:
    logger.info("%s is prepared from the same inputs and options; loading it", out)
    return PreparedData.load(out)


def _build_in_place(
    splits: dict[str, tuple[Path, Path]],
    out: Path,
    options: dict,
    fingerprint: str,
    length_filter: LengthFilter,
    extras: dict[str, Path],
    given_vocab: Vocab | None,
) -> None:
    """Build the dataset in a temporary folder beside `out`, then put it in `out`'s place."""
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    tmp.chmod(0o755)  # mkdtemp makes it private; the dataset is not
    try:
        start = time.perf_counter()
        meta = _build(splits, tmp, options, fingerprint, length_filter, given_vocab)
        for name, path in extras.items():
            shutil.copyfile(path, tmp / name)
        _swap(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    logger.info(
        "prepared %s in %.1fs: vocabulary %d, train pairs %s",
        out,
        time.perf_counter() - start,
        meta["vocab_size_actual"],
        meta["filter_report"],
    )


def _optional_inputs(whole_tokens: Sequence[str], extras: dict[str, Path]) -> dict:
    """Options that older folders lack: left out when unused, so their fingerprints stand."""
    options: dict = {}
    if whole_tokens:
        options["whole_tokens"] = sorted(whole_tokens)
    if extras:  # their contents are inputs too
        options["extra_files"] = {name: _file_hash(path) for name, path in sorted(extras.items())}
    return options


def _build(
    splits: dict[str, tuple[Path, Path]],
    folder: Path,
    options: dict,
    fingerprint: str,
    length_filter: LengthFilter,
    given_vocab: Vocab | None,
) -> dict:
    texts = {name: read_parallel(*paths) for name, paths in splits.items()}
    for name, text in texts.items():  # an empty dev set would fail only at the first validation
        if not text.src:
            raise DataError(f"{splits[name][0]}: no lines; the {name} split needs at least one")
    train = texts["train"]
    if given_vocab is not None:
        vocab = adopt(given_vocab, folder / "vocab.model", train.src + train.tgt)
    else:
        vocab = train_joint(
            train.src + train.tgt,
            options["vocab_size"],
            folder / "vocab",
            character_coverage=options["character_coverage"],
            whole_tokens=options.get("whole_tokens", ()),
        )
    report: dict[str, int] = {}
    counts = {}
    for name, text in texts.items():
        src, tgt = vocab.encode(text.src), vocab.encode(text.tgt)
        if name == "train":  # dev/test stay whole: their references must stay aligned
            keep, report = filter_pairs(src, tgt, length_filter)
            if not keep:
                raise DataError(f"{splits[name][0]}: the length filter dropped every pair")
        else:
            keep = list(range(len(src)))
            _write_text(folder, name, text)
        _write_split(folder / f"{name}.npz", src, tgt, keep)
        counts[name] = {"lines": len(src), "pairs": len(keep)}
        counts[name].update(src_file=str(splits[name][0]), tgt_file=str(splits[name][1]))
    meta = {
        "format": FORMAT,
        "fingerprint": fingerprint,
        **options,
        "vocab_size_actual": vocab.size,
    }
    meta.update(splits=counts, filter_report=report, sentencepiece=sentencepiece.__version__)
    (folder / "meta.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    return meta


def _write_split(path: Path, src: list[list[int]], tgt: list[list[int]], keep: list[int]) -> None:
    chosen_src, chosen_tgt = [src[i] for i in keep], [tgt[i] for i in keep]
    EncodedSplit.from_sequences(chosen_src, chosen_tgt, np.asarray(keep)).save(path)


def _flatten(seqs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Sequences as one flat int32 array and the n + 1 int64 offsets of their starts."""
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in seqs], out=offsets[1:])
    flat = itertools.chain.from_iterable(seqs)
    return np.fromiter(flat, dtype=np.int32, count=int(offsets[-1])), offsets


def _write_text(folder: Path, name: str, text: ParallelText) -> None:
    for side, lines in (("src", text.src), ("tgt", text.tgt)):
        body = "".join(line + "\n" for line in lines)
        (folder / f"{name}.{side}.txt").write_text(body, encoding="utf-8", newline="\n")


def _fingerprint(splits: dict[str, tuple[Path, Path]], options: dict) -> str:
    """A hash of the input files' contents (not their paths or times) and of every option."""
    files = {}
    for name, paths in sorted(splits.items()):
        files[name] = [_file_hash(Path(p)) for p in paths]
    tree = {"format": FORMAT, "files": files, "options": options}
    tree["sentencepiece"] = sentencepiece.__version__
    return hashlib.sha256(json.dumps(tree, sort_keys=True, default=str).encode()).hexdigest()


def _file_hash(path: Path) -> str:
    try:
        with path.open("rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except FileNotFoundError as error:
        raise DataError(f"{path}: file not found") from error


def _stored_fingerprint(out: Path) -> str | None:
    try:
        return json.loads((out / "meta.json").read_text()).get("fingerprint")
    except (OSError, ValueError, AttributeError):
        return None


def _check_replaceable(out: Path) -> None:
    """Refuse to replace a non-empty folder that is not a prepared dataset: it is someone's data."""
    if out.exists() and not (out / "meta.json").is_file() and any(out.iterdir()):
        raise DataError(f"{out}: exists and is not a prepared dataset; refusing to replace it")


def _remove_leftovers(out: Path) -> None:
    """Delete the folders a killed `prepare` of `out` left beside it (a dataset half-built, or
    the one it replaced): each as large as the dataset."""
    for prefix in (f".{out.name}.tmp-", f".{out.name}.old-"):
        for folder in out.parent.glob(glob.escape(prefix) + "*"):
            logger.info("removing %s, left by a prepare that was killed", folder)
            shutil.rmtree(folder, ignore_errors=True)


def _swap(new: Path, out: Path) -> None:
    """Put `new` in place of `out`: two renames, so a reader never sees a half-written folder."""
    if out.exists():
        old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old-"))
        os.replace(out, old / out.name)
        os.replace(new, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(new, out)
