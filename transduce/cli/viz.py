"""`transduce attention` and `explain`: the model's attention drawn, and one encoder layer walked
through step by step."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

logger = logging.getLogger("transduce")


def add_verbs(verbs) -> None:
    _add_attention(verbs)
    _add_explain(verbs)


def _add_attention(verbs) -> None:
    p = verbs.add_parser(
        "attention",
        help="draw a sentence's attention: PNG figures and an interactive HTML page",
        description="Capture the attention weights the model uses on one sentence and its "
        "translation, and draw them: encoder self-attention as lines (the paper's figures 3-5), "
        "heatmaps, a grid of every layer and head, and one self-contained HTML page.",
    )
    p.add_argument("--model", type=Path, required=True, help="a run folder, or one checkpoint file")
    p.add_argument("--sentence", required=True, help="the source sentence")
    p.add_argument("--target", help="the target to attend over (default: the model's translation)")
    p.add_argument("--out", type=Path, required=True, help="folder for the PNG and HTML files")
    p.add_argument(
        "--layer",
        type=int,
        help="layer of the line figure and heatmaps (0-based; default: the penultimate)",
    )
    p.add_argument(
        "--merge-words",
        action="store_true",
        help="sub-words merged into words: weights summed over keys, averaged over queries",
    )
    p.add_argument(
        "--beside",
        type=Path,
        action="append",
        default=[],
        metavar="RUN",
        help="another model (e.g. the LSTM on the same data; repeatable): its encoder-decoder "
        "attention on the same target is drawn beside this one's in cross_side_by_side.png",
    )
    p.add_argument("--device")
    p.set_defaults(run=_attention)


def _attention(args) -> None:
    from ..decoding.translate import Translator
    from ..viz.views import attention_views, side_by_side

    translator = Translator.load(args.model, device=args.device)
    written = attention_views(
        translator, args.sentence, args.out, args.target, args.layer, args.merge_words
    )
    if args.beside:
        models = [(args.model.name, translator)]
        models += [(run.name, Translator.load(run, device=args.device)) for run in args.beside]
        path = args.out / "cross_side_by_side.png"
        written.append(side_by_side(models, args.sentence, path, args.target))
    for path in written:
        sys.stdout.write(f"{path}\n")


def _add_explain(verbs) -> None:
    p = verbs.add_parser(
        "explain",
        help="walk a sentence through one encoder layer, printing every number",
        description="Print each step of one encoder layer (s3): X, Q, K, V per head, QK^T, "
        "/ sqrt(d_k), the mask, the softmax, Z, Concat and W_O, residual and LayerNorm, the FFN. "
        "Without --model, a tiny random model (seeded) over the sentence's words.",
    )
    p.add_argument("--sentence", required=True)
    p.add_argument("--model", type=Path, help="a run folder or checkpoint file (default: random)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random model")
    p.add_argument("--d-model", type=int, default=4, help="width of the random model")
    p.add_argument("--heads", type=int, default=2, help="heads of the random model")
    p.add_argument("--layer", type=int, default=0, help="which encoder layer (0-based)")
    p.add_argument("--json", action="store_true", help="every step as JSON, for notebooks")
    p.add_argument("--decimals", type=int, default=4)
    p.set_defaults(run=_explain)


def _explain(args) -> None:
    from ..viz.explain import explain

    found = explain(
        args.sentence,
        args.model,
        seed=args.seed,
        d_model=args.d_model,
        heads=args.heads,
        layer=args.layer,
    )
    sys.stdout.write((found.to_json() if args.json else found.text(decimals=args.decimals)) + "\n")
