"""Helpers of the server's tests: the toy model served on loopback by a real uvicorn, a gate that
holds the decoding worker, and the metrics read back."""

from __future__ import annotations

import random
import re
import threading
from pathlib import Path

from transduce.config import DecodeConfig

from .conftest import TOY_WORDS, save_toy_model

# Short outputs keep the random toy model quick; beam 2 so that n-best has two to give.
DECODE = DecodeConfig(beam_size=2, max_len_b=5)


def toy_engine(folder: Path):
    """The toy model saved as one file and loaded as `transduce serve --model` loads it."""
    from transduce.serve.engine import Engine

    return Engine.load(save_toy_model(folder, DECODE))


def translated(url: str, body: dict) -> dict:
    """`POST /v1/translate` with `body`: the answer's JSON, which must be a 200's."""
    import httpx

    with httpx.Client(base_url=url) as client:
        answer = client.post("/v1/translate", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()


def sentences(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(TOY_WORDS) for _ in range(rng.randint(1, 8))) for _ in range(n)]


class Gate:
    """Holds the worker inside `engine.translate` until `opened` is set, and records every line
    that reaches the model."""

    def __init__(self, engine, monkeypatch) -> None:
        self.entered, self.opened = threading.Event(), threading.Event()
        self.decoded: list[str] = []
        real = engine.translate

        def gated(works):
            self.decoded.extend(line for work in works for line in work.lines)
            self.entered.set()
            assert self.opened.wait(60), "the test never opened the gate"
            return real(works)

        # The routes hand the worker `engine.translate`; monkeypatch restores it after the test.
        monkeypatch.setattr(engine, "translate", gated)


def metric(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample of the Prometheus text `text`, or None."""
    wanted = ",".join(f'{key}="{value}"' for key, value in labels.items())
    pattern = re.escape(name) + (r"\{" + re.escape(wanted) + r"\}" if labels else "") + r" (\S+)$"
    found = re.search("^" + pattern, text, flags=re.MULTILINE)
    return float(found[1]) if found else None
