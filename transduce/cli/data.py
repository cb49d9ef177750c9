"""`transduce prepare`: read or download a corpus, train the joint BPE, encode every split."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from .common import env_path

# sentencepiece's advice: character coverage 0.9995 (by tasks/translation.py's base_language)
WIDE_SCRIPTS = {"ja", "jpn", "zh", "zho", "cmn", "yue", "wuu", "ko", "kor"}


def add_verbs(verbs) -> None:
    p = verbs.add_parser(
        "prepare",
        help="read or download a corpus, train the BPE, encode it",
        description="Prepare a parallel corpus: read it from --data-dir or "
        "download it, check it, train a joint BPE, encode and store every split. "
        "`ptb` prepares the Penn Treebank (the full WSJ in DIR/wsj, or the NLTK sample in "
        "DIR/ptb_sample) for parsing: words in, linearised trees out (s6.3).",
    )
    p.add_argument("corpus", choices=["multi30k", "small_parallel_enja", "files", "ptb"])
    p.add_argument(
        "--data-dir",
        type=Path,
        default=env_path("TRANSDUCE_DATA"),
        help="folder holding multi30k/ etc. (default $TRANSDUCE_DATA; else download)",
    )
    p.add_argument("--out", type=Path, required=True, help="folder for the prepared data")
    p.add_argument(
        "--vocab-size",
        type=int,
        help="joint BPE size (default 10000; ptb: 16000, as the paper's WSJ-only parser)",
    )
    p.add_argument(
        "--vocab",
        type=Path,
        help="encode with this vocabulary instead of training one: a trained model (run folder "
        "or checkpoint), a prepared folder or a sentencepiece .model; to fine-tune that model on "
        "this data (`train --init`)",
    )
    p.add_argument("--force", action="store_true", help="redo even if --out is up to date")
    _add_parallel_arguments(p)
    _add_treebank_arguments(p)
    p.set_defaults(run=_prepare)


def _add_parallel_arguments(p) -> None:
    p.add_argument("--src", help="source language, e.g. en (not for ptb)")
    p.add_argument("--tgt", help="target language, e.g. de (not for ptb)")
    p.add_argument(
        "--variant",
        default="raw",
        choices=["raw", "tok"],
        help="multi30k: raw cased text, or the lowercased Moses-tokenized files",
    )
    p.add_argument(
        "--max-len", type=int, default=250, help="drop training pairs longer than this (subwords)"
    )
    p.add_argument(
        "--max-len-ratio", type=float, default=9.0, help="drop pairs of a longer length ratio"
    )
    p.add_argument(
        "--character-coverage",
        type=float,
        default=None,
        help="sentencepiece character coverage (default 1.0; 0.9995 for ja/zh/ko)",
    )
    p.add_argument(
        "--tokenized",
        action="store_true",
        help="with `files`: the text is lowercased and tokenized already; BLEU is then "
        "computed lowercased on its tokens (named corpora know this themselves)",
    )
    for name in ("train", "dev", "test"):
        p.add_argument(f"--{name}-src", type=Path, help=f"with `files`: the {name} source file")
        p.add_argument(f"--{name}-tgt", type=Path, help=f"with `files`: the {name} target file")


def _add_treebank_arguments(p) -> None:
    p.add_argument(
        "--tags",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="ptb: keep the POS tags in the linearised trees (default: XX for each word, as "
        "Vinyals et al. and the paper; the gold tags are put back before scoring)",
    )
    p.add_argument(
        "--train-fraction",
        type=float,
        default=1.0,
        help="ptb: keep this first part of the training trees (for learning curves)",
    )


def _prepare(args) -> None:
    data = _prepare_treebank(args) if args.corpus == "ptb" else _prepare_parallel(args)
    logging.getLogger("transduce").info(
        "prepared %s: splits %s, vocabulary %d, training pairs %s",
        args.out,
        ", ".join(data.splits),
        data.vocab.size,
        data.meta["filter_report"],
    )


def _vocab_size(args, default: int) -> int:
    if args.vocab_size is None:
        return default
    if args.vocab_size <= 0:
        raise ValueError(f"--vocab-size must be positive, got {args.vocab_size}")
    return args.vocab_size


def _prepare_treebank(args):
    from ..data.ptb import prepare_treebank

    if args.vocab is not None:
        raise ValueError("--vocab is for parallel corpora; ptb trains its own (tree labels whole)")
    if args.data_dir is None:
        raise ValueError("ptb needs --data-dir (or $TRANSDUCE_DATA): the treebank is licensed")
    vocab_size = _vocab_size(args, 16000)
    return prepare_treebank(
        args.data_dir,
        args.out,
        tags=args.tags,
        vocab_size=vocab_size,
        train_fraction=args.train_fraction,
        force=args.force,
    )


def _prepare_parallel(args):
    from ..data.corpus import LengthFilter, corpus_files, is_tokenized
    from ..data.dataset import prepare
    from ..tasks.translation import base_language, scoring

    if not (args.src and args.tgt):
        raise ValueError(f"{args.corpus} needs --src and --tgt")
    vocab_size = _vocab_size(args, 10000)  # before any download
    vocab = _given_vocab(args)
    if args.corpus == "files":
        splits, tokenized = _user_files(args), args.tokenized
    else:
        splits = corpus_files(
            args.corpus, args.src, args.tgt, variant=args.variant, data_dir=args.data_dir
        )
        tokenized = is_tokenized(args.corpus, args.variant)
    coverage = args.character_coverage
    if coverage is None:
        languages = {base_language(args.src), base_language(args.tgt)}
        coverage = 0.9995 if languages & WIDE_SCRIPTS else 1.0
    return prepare(
        splits,
        args.out,
        vocab_size=vocab_size,
        length_filter=LengthFilter(max_len=args.max_len, max_len_ratio=args.max_len_ratio),
        description={
            "corpus": args.corpus,
            "variant": args.variant,
            "src": args.src,
            "tgt": args.tgt,
        },
        task=scoring(tokenized, args.tgt),
        character_coverage=coverage,
        vocab=vocab,
        force=args.force,
    )


def _given_vocab(args):
    """`--vocab`'s vocabulary, which replaces the BPE that `--vocab-size` would train."""
    if args.vocab is None:
        return None
    if args.vocab_size is not None:
        raise ValueError("give --vocab or --vocab-size, not both: --vocab brings its own size")
    from ..models.saved import load_vocab

    return load_vocab(args.vocab)


def _user_files(args) -> dict[str, tuple[Path, Path]]:
    splits = {}
    for name in ("train", "dev", "test"):
        src, tgt = getattr(args, f"{name}_src"), getattr(args, f"{name}_tgt")
        if (src is None) != (tgt is None):
            raise ValueError(f"give both --{name}-src and --{name}-tgt, or neither")
        if src is not None:
            splits[name] = (src, tgt)
    if "train" not in splits or "dev" not in splits:
        raise ValueError("`files` needs --train-src/--train-tgt and --dev-src/--dev-tgt")
    return splits
