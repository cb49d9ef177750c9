"""`transduce serve`: the HTTP API and the page, on loopback unless told otherwise."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from ..config import PRECISIONS
from .common import add_models_argument


def add_verbs(verbs) -> None:
    from ..serve.settings import HELP, ServeSettings

    p = verbs.add_parser(
        "serve",
        help="serve a model over HTTP: a JSON API, metrics and a page to translate",
        description="Start the ASGI app (FastAPI under uvicorn): POST /v1/translate, "
        "POST /v1/attention, GET /health, /v1/models, /metrics, /docs, and the page at /. "
        "Requests that arrive together are decoded together; each limit below is answered "
        "with its status code and a JSON message.",
    )
    add_models_argument(p)
    p.add_argument("--device")
    p.add_argument("--int8", action="store_true", help="CPU only: the large products in int8")
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        help="the search's large products on a CPU, as `translate --precision` (default: the "
        "run's decode.precision, auto)",
    )
    p.add_argument(
        "--channel",
        type=Path,
        help="a model of the reverse direction: requests with `channel_weight` have the beam's "
        "candidates re-ranked by score + weight * log P(source | candidate), as `translate "
        "--channel`",
    )
    p.add_argument(
        "--decoder",
        choices=("process", "thread"),
        default="process",
        help="where the model decodes: a process of its own, so that HTTP and decoding do not "
        "share one interpreter lock (default), or a thread of the server's process (one copy "
        "of the model fewer in memory; slower under many concurrent requests)",
    )
    p.add_argument(
        "--threads", type=int, help="torch threads for decoding (default: torch's own choice)"
    )
    defaults = ServeSettings()
    for field in fields(ServeSettings):
        default = getattr(defaults, field.name)
        p.add_argument(
            "--" + field.name.replace("_", "-"),
            type=type(default),
            default=default,
            help=f"{HELP[field.name]} (default: {default})",
        )
    p.set_defaults(run=_serve)


def _serve(args) -> None:
    try:
        from ..serve.engine import Engine
        from ..serve.server import serve
        from ..serve.worker import DecoderProcess
    except ImportError as missing:  # reported by main as this verb's error
        raise ValueError(f"{missing}: pip install 'transduce[serve]'") from missing
    from ..models.matmul import cache_products_for_decoding
    from ..serve.settings import ServeSettings

    cache_products_for_decoding()  # before the decoder process starts: it inherits them
    settings = ServeSettings(**{f.name: getattr(args, f.name) for f in fields(ServeSettings)})
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be at least 1, not {args.threads}")
    if args.decoder == "process":
        engine = DecoderProcess(args.model, args.device, args.int8, args.threads,
                                channel=args.channel, precision=args.precision)  # fmt: skip
    else:
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        engine = Engine.load(args.model, args.device, args.int8, args.channel, args.precision)
    serve(engine, settings, quiet=args.quiet)
