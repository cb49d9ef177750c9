"""The `transduce` command: each verb turns its arguments into a Config or paths, then makes one
library call. One module per verb group registers its verbs here."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from .. import __version__
from . import data, decode, experiments, export, serve, train, translate, viz

logger = logging.getLogger("transduce")

VERB_GROUPS = (export, data, train, translate, decode, experiments, viz, serve)


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(message)s",
        datefmt="%H:%M:%S",
    )
    from ..config import ConfigError
    from ..data.corpus import DataError
    from ..export import ExportError
    from ..training.checkpoint import CheckpointError
    from ..training.distributed import MainProcessFailed
    from ..training.loop import TrainingError
    from ..training.runlog import RunFolderError

    try:
        args.run(args)
    except (
        ConfigError,
        DataError,
        TrainingError,
        RunFolderError,
        MainProcessFailed,
        CheckpointError,
        ExportError,
        FileNotFoundError,
        ValueError,
    ) as error:
        sys.exit(f"transduce {args.verb}: error: {error}")
    except KeyboardInterrupt as stop:  # a training run says where it saved its state
        if not getattr(stop, "speaks", True):
            sys.exit(1)  # another process of the run says it
        sys.exit(f"transduce {args.verb}: interrupted" + (f": {stop}" if str(stop) else ""))
    except BrokenPipeError:  # e.g. `transduce evaluate ... | head -1`: the reader has gone
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except OSError as error:  # a folder where a file was named, no permission, a full disk
        where = f"{error.filename}: " if error.filename else ""
        sys.exit(f"transduce {args.verb}: error: {where}{error.strerror or error}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="transduce",
        description="The Transformer of 'Attention Is All You Need': prepare, train, translate.",
    )
    parser.add_argument("--version", action="version", version=f"transduce {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", help="log warnings only")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for group in VERB_GROUPS:
        group.add_verbs(verbs)
    return parser
