"""The main job end to end: prepare Multi30k, train the demo preset (tiny with a schedule sized to
ten minutes) for a bounded time, translate the 2016 test set with beam search, and score it both
ways."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from ..config import override, parse_assignments
from ..data.corpus import LengthFilter, corpus_files, is_tokenized
from ..data.dataset import prepare
from ..decoding.translate import Translator
from ..presets import preset
from ..tasks.metrics import bleu, chrf
from ..tasks.translation import scoring
from ..training.loop import train

logger = logging.getLogger(__name__)


# Up to this many minutes the demo trains the `demo` preset (a schedule sized to ten minutes, no
# dropout); beyond, `tiny`, whose warmup and dropout are set for hours.
DEMO_PRESET_MINUTES = 20


def default_preset(minutes: float) -> str:
    return "demo" if minutes <= DEMO_PRESET_MINUTES else "tiny"


def run_demo(
    data_dir: Path | None,
    out: Path,
    *,
    minutes: float,
    src: str = "en",
    tgt: str = "de",
    variant: str = "tok",
    preset_name: str | None = None,
    overrides: list[str] | None = None,
    device: str | None = None,
) -> dict:
    """Returns the scores, also written to `out/scores.json`."""
    files = corpus_files("multi30k", src, tgt, variant=variant, data_dir=data_dir)
    data = prepare(
        files,
        out / "data",
        vocab_size=10000,
        length_filter=LengthFilter(),
        description={"corpus": "multi30k", "variant": variant, "src": src, "tgt": tgt},
        task=scoring(is_tokenized("multi30k", variant)),
    )
    run_dir = out / "run"
    if run_dir.exists():  # the demo's own folder: each demo trains afresh
        logger.info("removing the previous demo run in %s", run_dir)
        shutil.rmtree(run_dir)
    budget = {"train.max_minutes": minutes, "train.max_steps": 10**9}
    config = override(preset(preset_name or default_preset(minutes)), budget)
    config = override(config, parse_assignments(overrides or []))
    train(config, data.path, run_dir, device=device)

    test = data.text("test")
    translator = Translator.load(run_dir, device=device)
    hypotheses = [hyps[0][0] for hyps in translator.translate(test.src)]
    (out / "test.hyp").write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
    scores = {
        "bleu": bleu(hypotheses, test.tgt, tokenized_text=is_tokenized("multi30k", variant)),
        "bleu_lowercase_tokenized": bleu(hypotheses, test.tgt, lowercase_tokenized=True),
        "chrf": chrf(hypotheses, test.tgt),
    }
    for name, score in scores.items():
        logger.info("test %s: %s", name, score)
    for source, hypothesis, reference in list(zip(test.src, hypotheses, test.tgt, strict=True))[:3]:
        logger.info(
            "example\n  source:      %s\n  translation: %s\n  reference:   %s",
            source,
            hypothesis,
            reference,
        )
    summary = {name: {"score": s.score, "signature": s.signature} for name, s in scores.items()}
    (out / "scores.json").write_text(json.dumps(summary, indent=2))
    logger.info("learning curve: %s; translations: %s", run_dir / "curve.png", out / "test.hyp")
    return summary
