"""`transduce export`: a model for Hugging Face, or through it for CTranslate2."""

from __future__ import annotations

from pathlib import Path


def add_verbs(verbs) -> None:
    p = verbs.add_parser(
        "export",
        help="write the model for Hugging Face or CTranslate2",
        description="Export a model as a Hugging Face folder (MarianMTModel if post-norm, "
        "PegasusForConditionalGeneration if pre-norm), or through it as a CTranslate2 model.",
    )
    p.add_argument("--model", type=Path, required=True, help="a run folder, or one checkpoint file")
    p.add_argument("--to", required=True, choices=["hf", "ctranslate2"])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--checkpoint", type=Path, help="default: average.pt, else the newest")
    p.add_argument(
        "--quantize",
        choices=["int8", "int8_float32", "int16", "float16"],
        help="ctranslate2 only: weight quantization",
    )
    p.set_defaults(run=_export)


def _export(args) -> None:
    from ..export import export_ctranslate2, export_hf

    if args.to == "hf":
        if args.quantize:
            raise ValueError("--quantize applies to --to ctranslate2 only")
        export_hf(args.model, args.out, args.checkpoint)
    else:
        export_ctranslate2(args.model, args.out, args.checkpoint, args.quantize)
