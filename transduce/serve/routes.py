"""The endpoints: `POST /v1/translate`, `POST /v1/score`, `POST /v1/attention`, `GET /health`,
`GET /v1/models`, `GET /metrics` and the page at `/`. Decoding goes through the batching worker; a
request waits for its result, its time budget or its client's departure, whichever comes first."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException

from ..config import TaskConfig
from ..decoding.glossary import Glossary
from ..decoding.sampling import Sampling
from ..decoding.terms import MAX_TERMS
from ..tasks.translation import is_tokenized
from .batcher import Job, QueueFull
from .engine import AttentionWork, BadRequest, ScoreWork, TranslateWork
from .schemas import (
    AttentionRequest,
    AttentionResponse,
    Health,
    ModelList,
    Problem,
    ScoreRequest,
    ScoreResponse,
    TranslateRequest,
    TranslateResponse,
)
from .worker import DecoderRestarted

router = APIRouter()
# The routes whose POST body is JSON (`limits.Guard` answers 415 for another body there).
JSON_BODY_PATHS = frozenset({"/v1/translate", "/v1/score", "/v1/attention"})

ERRORS = {
    code: {"model": Problem, "description": why}
    for code, why in {
        400: "malformed JSON, or a body that is not UTF-8",
        413: "a body, a sentence or a list of sentences over its limit",
        415: "a body without a JSON Content-Type, or a compressed one",
        422: "valid JSON of the wrong shape: a wrong type, an empty sentence, an option too "
        "large; or attention (views, alignments) from an ensemble that has none to show",
        429: "the queue is full, or its work would outlast the request's time budget: try "
        "again after Retry-After seconds",
        503: "the decoding process died with this request's work and was restarted: send it again",
        504: "the request's time budget ran out; its work was dropped or stopped",
    }.items()
}

# What a 504 says became of the request's work (`Batcher.withdraw`).
WITHDRAWN = {
    "dropped": "its work was dropped before decoding",
    "stopped": "its decoding was stopped",
    "discarded": "the decoding under way goes on and its result is thrown away",
}


# HEAD wherever GET (RFC 9110: monitors probe with it), out of the schema: one operation a path.
@router.head("/health", include_in_schema=False)
@router.get("/health", response_model=Health)
async def health(request: Request) -> Health:
    server = request.app.state.server
    return Health(status="ok", model=server.facts.name, queued_sentences=server.batcher.queued[0])


@router.head("/v1/models", include_in_schema=False)
@router.get("/v1/models", response_model=ModelList, response_model_exclude_unset=True)
async def models(request: Request) -> dict:
    return {"models": [request.app.state.server.facts.description]}


@router.head("/metrics", include_in_schema=False)
@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(request: Request) -> PlainTextResponse:
    server = request.app.state.server
    text = server.metrics.render(*server.batcher.queued)
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")


@router.head("/", include_in_schema=False)
@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def page(request: Request) -> HTMLResponse:
    return HTMLResponse(request.app.state.server.page)


@router.post("/v1/translate", response_model=TranslateResponse, responses=ERRORS)
async def translate(body: TranslateRequest, request: Request) -> TranslateResponse | Response:
    """Translate `text` or `texts`: beam search as `transduce translate` does, batched with
    whatever other requests are waiting."""
    server, started = request.app.state.server, _arrival(request)
    lines = body.lines
    if len(lines) > server.settings.max_sentences:
        raise HTTPException(413, f"{len(lines)} sentences; at most {server.settings.max_sentences}")
    decode = _decode_settings(server, body.beam_size, body.n_best, body.max_len_b,
                              body.no_repeat_ngram, body.no_unk)  # fmt: skip
    sampling = _sampling(server, body.sampling)
    tokens = _checked_lengths(server, lines)
    if body.alignments:  # refused here, before it is batched with requests that can be served
        _checked(server.facts.check_attention)
    prefixes, terms = body.prefix_lines, _terms_with_glossary(body, server.facts.task)
    if prefixes is not None or terms is not None:  # none could hold it: 422; too long: 413
        counts = _checked(server.facts.guided_lengths, prefixes, terms)
        kind = " and ".join(k for k, given in (("prefix", prefixes), ("terms", terms)) if given)
        _within_limit(server, counts, kind, "may take")  # an unfinished word: a piece a letter
    weight, avoid = body.channel_weight, tuple(body.avoid) if body.avoid else None
    if weight is not None and server.facts.channel is None:
        raise HTTPException(422, "this server has no channel model: start it with --channel")
    if avoid:
        _checked(server.facts.check_avoided, list(avoid), terms)
    work = TranslateWork(lines, decode, body.alignments, prefixes, sampling, terms, weight, avoid)
    run = server.engine.translate
    # Sampled work is never merged with other requests: its seed draws what `transduce translate
    # --sampling --seed` draws for its lines.
    key = ("translate", decode, weight, avoid) if sampling is None else object()
    rows = decode.beam_size if sampling is None else sampling.samples
    if terms is not None:  # its lines with terms are searched with the wider terms_beam
        rows = max(rows, decode.terms_beam)
    job = _job(server, work, key, run, len(lines), tokens, rows)
    found = await _result_of(request, server, job, started)
    if isinstance(found, Response):
        return found
    translations = [
        {**outputs[0], "n_best": outputs}
        for outputs in found  # the first is the best
    ]
    return TranslateResponse(
        model=server.facts.name, translations=translations, time_ms=_elapsed_ms(started)
    )


@router.post("/v1/score", response_model=ScoreResponse, responses=ERRORS)
async def score(body: ScoreRequest, request: Request) -> ScoreResponse | Response:
    """The model's log-probability of each pair's target given its source, as `transduce
    score` gives it (forced decoding): to rerank candidates, filter pairs, compare outputs."""
    server, started = request.app.state.server, _arrival(request)
    pairs = body.pairs
    if len(pairs) > server.settings.max_sentences:
        raise HTTPException(413, f"{len(pairs)} pairs; at most {server.settings.max_sentences}")
    sources, targets = [p.source for p in pairs], [p.target for p in pairs]
    tokens = _checked_lengths(server, sources) + _checked_lengths(server, targets, "target")
    # A parser's trees are read in the worker, and one that is none fails its call: its
    # requests are never merged, so that one malformed tree is refused alone.
    key = ("score",) if server.facts.description["metric"] != "f1" else object()
    job = _job(server, ScoreWork(sources, targets), key, server.engine.score, len(pairs), tokens, 1)
    found = await _result_of(request, server, job, started)
    if isinstance(found, Response):
        return found
    return ScoreResponse(model=server.facts.name, scores=found, time_ms=_elapsed_ms(started))


@router.post("/v1/attention", response_model=AttentionResponse, responses=ERRORS)
async def attention(body: AttentionRequest, request: Request) -> AttentionResponse | Response:
    """One sentence's attention weights, as the attention page draws them: per kind of
    attention, the query and key labels and every layer's [head][query][key] weights."""
    server, started = request.app.state.server, _arrival(request)
    sentences = [body.text] if body.target is None else [body.text, body.target]
    tokens = _checked_lengths(server, sentences)
    _checked(server.facts.check_layer, body.layer)  # before any decoding
    decode = _decode_settings(server, body.beam_size, 1, None)
    work = AttentionWork(body.text, body.target, decode, body.merge_words, body.layer)
    run = server.engine.attention
    job = _job(server, work, object(), run, 1, tokens, decode.beam_size)  # never merged
    found = await _result_of(request, server, job, started)
    if isinstance(found, Response):
        return found
    return AttentionResponse(model=server.facts.name, time_ms=_elapsed_ms(started), **found)


def _arrival(request: Request) -> float:
    return getattr(request.state, "arrived", None) or time.perf_counter()


def _elapsed_ms(started: float) -> float:
    return round(1000 * (time.perf_counter() - started), 3)


def _checked(call, *args):
    """`call(*args)`, its BadRequest answered 422."""
    try:
        return call(*args)
    except BadRequest as error:
        raise HTTPException(422, str(error)) from error


def _decode_settings(server, beam_size: int | None, n_best: int, max_len_b: int | None,
                     no_repeat_ngram: int | None = None, no_unk: bool | None = None):  # fmt: skip
    settings = server.settings
    if beam_size is not None and beam_size > settings.max_beam:
        raise HTTPException(422, f"beam_size={beam_size} exceeds the limit {settings.max_beam}")
    if max_len_b is not None and max_len_b > settings.max_len_b:
        raise HTTPException(422, f"max_len_b={max_len_b} exceeds the limit {settings.max_len_b}")
    given = (beam_size, n_best, max_len_b, no_repeat_ngram, no_unk)
    decode = _checked(server.facts.decode_config, *given)
    return replace(decode, terms_beam=min(decode.terms_beam, settings.max_beam))


def _sampling(server, options) -> Sampling | None:
    """The request's `Sampling`, or None; 422 for more samples than the largest beam."""
    if options is None:
        return None
    limit = server.settings.max_beam
    if options.samples > limit:
        raise HTTPException(422, f"samples={options.samples} exceeds the limit {limit} (max_beam)")
    return Sampling(**options.model_dump())


def _checked_lengths(server, lines: list[str], kind: str = "sentence") -> int:
    """The lines' subwords in all (EOS included); 413 for a line over the limit."""
    counts = server.facts.token_counts(lines)
    _within_limit(server, counts, kind)
    return sum(counts)


def _terms_with_glossary(body: TranslateRequest, task: TaskConfig) -> list[list[str]] | None:
    """Each line's terms, those of the glossary it uses added; None when no line has any. A
    glossary entry without a source or a translation: 422."""
    if not body.glossary:
        return body.term_lines
    try:
        glossary = Glossary(body.glossary.items(), is_tokenized(task))
    except ValueError as error:
        raise HTTPException(422, str(error)) from error
    terms = glossary.terms(body.lines, body.term_lines, MAX_TERMS)  # those a text uses first
    return terms if any(terms) else None


def _within_limit(server, counts: list[int], kind: str, has: str = "has") -> None:
    """413 for a count of subwords over the server's limit or the model's positions."""
    limit = server.settings.max_sentence_tokens
    if server.facts.max_positions is not None:
        limit = min(limit, server.facts.max_positions)
    for number, count in enumerate(counts, start=1):
        if count > limit:
            where = f"{kind} {number} of {len(counts)}" if len(counts) > 1 else f"the {kind}"
            raise HTTPException(
                413, f"{where} {has} {count} subwords (EOS included); at most {limit}"
            )


def _job(server, payload, key, run, sentences: int, tokens: int, beam: int) -> Job:
    deadline = time.monotonic() + server.settings.request_timeout_s
    future = asyncio.get_running_loop().create_future()
    return Job(payload, key, run, sentences, tokens, deadline, future, beam=beam)


async def _result_of(request: Request, server, job: Job, started: float):
    """The job's result; a Response when the client has gone; 429, 504 and 422 raised."""
    try:
        server.batcher.submit(job)
    except QueueFull as full:
        headers = {"Retry-After": str(full.retry_after or server.settings.retry_after_s)}
        raise HTTPException(429, str(full), headers=headers) from full
    budget = server.settings.request_timeout_s - (time.perf_counter() - started)
    gone = asyncio.ensure_future(_departure(request))
    try:
        done, _ = await asyncio.wait(
            {job.future, gone}, timeout=max(budget, 0), return_when="FIRST_COMPLETED"
        )
    finally:
        gone.cancel()
    if job.future in done:
        try:
            return job.future.result()
        except BadRequest as error:
            raise HTTPException(422, str(error)) from error
        except DecoderRestarted as error:
            headers = {"Retry-After": str(server.settings.retry_after_s)}
            raise HTTPException(503, str(error), headers=headers) from error
    job.future.cancel()
    if gone in done:
        server.batcher.withdraw(job, "disconnected")
        return Response(status_code=499)  # nobody reads it: nginx's "client closed request"
    fate = server.batcher.withdraw(job, "timeout")
    budget = server.settings.request_timeout_s
    raise HTTPException(504, f"no result within the time budget of {budget} s; {WITHDRAWN[fate]}")


async def _departure(request: Request) -> None:
    """Returns when the client disconnects (the body has been read: nothing else can come)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
        await asyncio.sleep(0.05)  # a server that answers at once with empty bodies: poll
