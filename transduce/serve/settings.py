"""The server's settings: where it listens, the limits each request is held to, and how the
decoding worker batches. Every limit is answered with a status and a JSON message (README,
"Serving")."""

from __future__ import annotations

from dataclasses import dataclass, fields

from ..config import ConfigError


@dataclass(frozen=True)
class ServeSettings:
    host: str = "127.0.0.1"  # loopback unless told otherwise
    port: int = 8000
    max_body_bytes: int = 256 * 1024  # a larger body: 413
    max_sentences: int = 64  # sentences in one request; more: 413
    max_sentence_tokens: int = 256  # subwords of one sentence (EOS included); more: 413
    max_beam: int = 16  # the largest beam_size a request may ask for; larger: 422
    max_len_b: int = 256  # the largest max_len_b (output <= input + this) a request may ask for
    max_queue_sentences: int = 1024  # sentences waiting for the worker; a request past it: 429
    retry_after_s: int = 1  # the Retry-After of a 429
    request_timeout_s: float = 30.0  # a request's time budget; past it: 504, its work dropped
    body_timeout_s: float = 10.0  # the longest a body may take to arrive; longer: 408
    batch_tokens: int = 4096  # the worker takes queued sentences up to this many subwords ...
    batch_wait_ms: float = 5.0  # ... or what has come this long after the first one arrived

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if field.name not in ("host", "port") and not value > 0:
                raise ConfigError(f"serve.{field.name} must be positive, not {value}")
        if not 0 <= self.port < 65536:
            raise ConfigError(f"serve.port must be in 0..65535, not {self.port}")


# What each setting means, for `transduce serve --help` and the README.
HELP = {
    "host": "address to listen on: loopback only unless told otherwise (0.0.0.0: every one)",
    "port": "port to listen on (0: any free port)",
    "max_body_bytes": "largest request body in bytes (413 above)",
    "max_sentences": "most sentences in one request (413 above)",
    "max_sentence_tokens": "most subwords in one sentence, EOS included (413 above)",
    "max_beam": "largest beam_size a request may ask for (422 above)",
    "max_len_b": "largest max_len_b a request may ask for (422 above)",
    "max_queue_sentences": "most sentences waiting to be decoded (429 with Retry-After above)",
    "retry_after_s": "the Retry-After header of a 429, in seconds",
    "request_timeout_s": "a request's time budget in seconds (504 past it, its work dropped)",
    "body_timeout_s": "the longest a request's body may take to arrive, in seconds (408 past it)",
    "batch_tokens": "the decoding worker takes waiting sentences up to this many subwords",
    "batch_wait_ms": "... or those that came within this many ms of the first",
}
