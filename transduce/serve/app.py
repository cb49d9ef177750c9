"""The ASGI app: `create_app(engine, settings)` wires the routes, the limits, the metrics and
the one decoding worker, which starts and stops with the app (its lifespan). The engine is an
`Engine` (decoding in a thread of this process) or a `DecoderProcess` (in a process of its own,
what `transduce serve` runs); the routes check requests with its `facts` alone."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI

from .. import __version__
from ..decoding.translate import Translator
from .batcher import Batcher
from .engine import Engine, ModelFacts
from .limits import Guard, install_error_handlers
from .metrics import Metrics
from .page import render_index
from .routes import JSON_BODY_PATHS, router
from .settings import ServeSettings
from .worker import DecoderProcess

DESCRIPTION = """Translation with a Transformer (or the recurrent baseline) trained by transduce.
Requests that arrive together are decoded together; each answer is what `transduce translate`
gives for the same sentence and settings."""


@dataclass
class Server:
    """What the routes reach through `request.app.state.server`."""

    engine: Engine | DecoderProcess  # translate(works), attention(works)
    facts: ModelFacts
    settings: ServeSettings
    metrics: Metrics
    batcher: Batcher
    page: str


def create_app(
    engine: Engine | DecoderProcess | Translator, settings: ServeSettings | None = None
) -> FastAPI:
    """The app serving `engine` (a `Translator` is served as an `Engine` named "model")."""
    if isinstance(engine, Translator):
        engine = Engine(engine, "model")
    if not isinstance(engine, Engine | DecoderProcess):
        raise TypeError(
            f"engine must be an Engine, a DecoderProcess or a Translator, not {engine!r}"
        )
    settings = settings or ServeSettings()
    if not isinstance(settings, ServeSettings):
        raise TypeError(f"settings must be a ServeSettings, not {type(settings).__name__}")
    metrics = Metrics()
    batcher = Batcher(settings, metrics, abandon=getattr(engine, "abandon", None))
    facts = engine.facts
    repeats = facts.decode.no_repeat_ngram if facts.task.name == "translation" else None
    page = render_index(facts.name, facts.decode.beam_size, settings.max_beam, facts.no_attention,
                        facts.decode.terms_beam, repeats)  # fmt: skip

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        batcher.start()
        yield
        batcher.stop()

    app = FastAPI(
        title="transduce", version=__version__, description=DESCRIPTION, lifespan=lifespan
    )
    app.state.server = Server(engine, facts, settings, metrics, batcher, page)
    app.include_router(router)
    install_error_handlers(app)
    app.add_middleware(
        Guard,
        max_body_bytes=settings.max_body_bytes,
        metrics=metrics,
        body_timeout_s=settings.body_timeout_s,
        json_paths=JSON_BODY_PATHS,
    )
    return app
