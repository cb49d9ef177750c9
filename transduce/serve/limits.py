"""Limits and bad input, each answered with its status and a JSON `{"detail": ...}`: a body over
the size limit (413, counted as it arrives, so a body without Content-Length is held to it too),
a body not declared JSON or sent compressed (415), malformed JSON or invalid UTF-8 (400), a
well-formed body of the wrong shape (422), and any
failure of ours (500), after which the server keeps serving. The request counter and latency of
`/metrics` are taken here too, around every request."""

from __future__ import annotations

import asyncio
import json
import logging
import time

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .metrics import Metrics

logger = logging.getLogger(__name__)


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body exceeds {limit} bytes")


class BodyTooSlow(HTTPException):
    def __init__(self, seconds: float) -> None:
        super().__init__(408, f"the request body did not arrive within {seconds} s")


class Guard:
    """ASGI middleware: the body's size and time limits, and each request's status and latency
    counted."""

    def __init__(
        self,
        app: ASGIApp,
        max_body_bytes: int,
        metrics: Metrics,
        body_timeout_s: float = 10.0,
        json_paths: frozenset[str] = frozenset(),
    ) -> None:
        """`json_paths`: the routes whose POST body must be JSON (415 otherwise); elsewhere a
        POST is the router's to refuse (404, 405)."""
        self.app, self.limit, self.metrics = app, max_body_bytes, metrics
        self.body_timeout_s, self.json_paths = body_timeout_s, json_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.perf_counter(), [0]
        scope.setdefault("state", {})["arrived"] = started  # the time budget starts here

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            headers = _headers(scope)
            declared = _content_length(headers)
            json_post = scope["method"] == "POST" and scope["path"] in self.json_paths
            unsupported = _unsupported_body(headers) if json_post else None
            if declared is not None and declared > self.limit:  # refused before it is read
                await _problem(413, BodyTooLarge(self.limit).detail)(scope, receive, sending)
            elif unsupported:
                await _problem(415, unsupported)(scope, receive, sending)
            else:
                await self.app(scope, self._counted(receive), sending)
        except Exception as error:
            # A failure of ours, answered here: Starlette's own handler of it answers and then
            # raises it again, and uvicorn closes the connection, so the client saw a reset.
            if status[0]:  # too late for another answer
                raise
            logger.exception("%s %s failed", scope["method"], scope["path"], exc_info=error)
            answer = _problem(500, f"internal error: {type(error).__name__}")
            await answer(scope, receive, sending)
        finally:
            seconds = time.perf_counter() - started
            self.metrics.observe_request(scope["path"], status[0] or 500, seconds)

    def _counted(self, receive: Receive) -> Receive:
        """`receive`, raising BodyTooLarge once the body passes the limit, and BodyTooSlow if it
        has not all come within the time limit of its first part being asked for (a client
        sending a byte a second, or a Content-Length larger than what it sends, would otherwise
        hold its request open for ever). Once the body is whole, `receive` waits as it will: for
        the client's departure."""
        seen, whole, deadline = 0, False, None

        async def counted() -> Message:
            nonlocal seen, whole, deadline
            if whole:
                return await receive()
            loop = asyncio.get_running_loop()
            deadline = deadline or loop.time() + self.body_timeout_s
            try:
                message = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0))
            except TimeoutError:
                raise BodyTooSlow(self.body_timeout_s) from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                whole = not message.get("more_body", False)
                if seen > self.limit:
                    raise BodyTooLarge(self.limit)
            return message

        return counted


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lowercased name, values stripped and lowercased (the first of
    a name given twice wins)."""
    headers: dict[str, str] = {}
    for name, value in scope.get("headers", []):
        headers.setdefault(name.decode("latin-1").lower(), value.decode("latin-1").strip().lower())
    return headers


def _unsupported_body(headers: dict[str, str]) -> str | None:
    """Why a POST body is not one we read, or None. Without a JSON Content-Type (curl's `-d`
    sends a form's) the body would be refused later as a dict of the wrong shape, a 422 that
    says nothing of the real mistake."""
    kind = headers.get("content-type", "").split(";")[0].strip()
    if kind != "application/json" and not kind.endswith("+json"):
        given = f"Content-Type {kind}" if kind else "no Content-Type"
        return f"the body must be JSON, sent with Content-Type: application/json ({given})"
    encoding = headers.get("content-encoding", "identity")
    if encoding != "identity":
        return f"Content-Encoding {encoding} is not accepted: send the body uncompressed"
    return None


def _content_length(headers: dict[str, str]) -> int | None:
    try:
        return int(headers["content-length"])
    except (KeyError, ValueError):
        return None


def _problem(status: int, detail: str, headers: dict | None = None, **extra) -> JSONResponse:
    return JSONResponse({"detail": detail, **extra}, status_code=status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(HTTPException, _http_error)


async def _invalid(request: Request, error: RequestValidationError) -> JSONResponse:
    """Malformed JSON: 400; valid JSON of the wrong shape: 422, each problem named."""
    errors = error.errors()
    for problem in errors:
        if problem.get("type") == "json_invalid":
            reason = problem.get("ctx", {}).get("error", "")
            at = [part for part in problem.get("loc", ())[1:] if isinstance(part, int)]
            where = f" at character {at[0]}" if at else ""
            return _problem(400, f"malformed JSON{where}: {reason}".rstrip(": "))
        if problem.get("type") == "missing" and tuple(problem.get("loc", ())) == ("body",):
            return _problem(400, "the body is empty: send a JSON object")
    named = [
        {"loc": [str(part) for part in problem.get("loc", ())], "msg": problem.get("msg", "")}
        for problem in errors
    ]
    summary = "; ".join(f"{'.'.join(p['loc'][1:]) or 'body'}: {p['msg']}" for p in named)
    return _problem(422, f"invalid request: {summary}", errors=named)


async def _http_error(request: Request, error: HTTPException) -> JSONResponse:
    detail = error.detail
    if error.status_code == 400 and isinstance(error.__cause__, UnicodeDecodeError):
        detail = "the body is not valid UTF-8"
    elif error.status_code == 400 and isinstance(error.__cause__, json.JSONDecodeError):
        detail = "malformed JSON"
    elif error.status_code == 400 and isinstance(error.__cause__, RecursionError):
        detail = "malformed JSON: nested too deeply"
    elif error.status_code == 400 and isinstance(error.__cause__, ValueError):
        cause = str(error.__cause__)  # Python's own reads "... use sys.set_int_max_str_digits()"
        detail = "malformed JSON: " + ("a number too long to read" if "digits" in cause else cause)
    return _problem(error.status_code, str(detail), getattr(error, "headers", None))
