"""Noisy-channel reranking (`decoding/channel.py`, `translate --channel`): the beam's candidates
ranked by their score plus the weighted log P(source | candidate) of the reverse model, asked in
the right direction; weight 0 is the beam's own order."""

from __future__ import annotations

import pytest
import torch

from transduce.cli import main
from transduce.config import DecodeConfig
from transduce.decoding.channel import channel_rerank
from transduce.decoding.forced import TargetScore

from .conftest import save_toy_model, toy_translator, write_lines

LINES = ["the dog runs", "", "green grass outside", "children"]
DECODE = DecodeConfig(beam_size=3, max_len_b=5)


class _Reverse:
    """A reverse model that scores each (candidate, line) pair by a table of its own, and
    records what it was asked."""

    def __init__(self, channel: dict[tuple[str, str], float]) -> None:
        self.channel, self.asked = channel, []

    def score(self, sources, targets):
        self.asked.append((list(sources), list(targets)))
        pairs = zip(sources, targets, strict=True)
        return [TargetScore(self.channel.get(pair, -50.0), 1, 0) for pair in pairs]


def test_the_channel_is_asked_for_the_source_given_each_candidate_and_weighs_in(tmp_path):
    """Every candidate of the beam is scored by the reverse model as its source (its target: the
    line), and the order is score + weight * log P(line | candidate), best first: here the
    channel prefers each line's last candidate strongly enough to turn the beam's order round."""
    forward = toy_translator(tmp_path)
    beam = forward.translate(LINES, DecodeConfig(beam_size=3, n_best=3, max_len_b=5))
    channel = {
        (text, LINES[i]): -10.0 * rank
        for i, hyps in enumerate(beam)
        for rank, (text, _) in enumerate(hyps[::-1])
    }
    reverse = _Reverse(channel)
    ranked = channel_rerank(forward, reverse, LINES, weight=2.0, decode=DECODE)
    ((sources, targets),) = reverse.asked
    assert sources == [text for i in (0, 2, 3) for text, _ in beam[i]]
    assert targets == [LINES[i] for i in (0, 2, 3) for _ in beam[i]]
    assert ranked[1] == [("", 0.0)]
    for i in (0, 2, 3):
        sums = [(t, s + 2.0 * channel[t, LINES[i]]) for t, s in beam[i]]
        expected = sorted(sums, key=lambda pair: -pair[1])
        assert (
            [t for t, _ in ranked[i]] == [t for t, _ in expected] == [t for t, _ in beam[i]][::-1]
        )
        assert [s for _, s in ranked[i]] == pytest.approx([s for _, s in expected])


def test_weight_zero_is_the_beams_own_order_and_a_bad_weight_is_refused(tmp_path):
    forward = toy_translator(tmp_path)
    beam = forward.translate(LINES, DecodeConfig(beam_size=3, n_best=3, max_len_b=5))
    ranked = channel_rerank(forward, _Reverse({}), LINES, weight=0.0, decode=DECODE)
    assert [[t for t, _ in hyps] for hyps in ranked] == [[t for t, _ in hyps] for hyps in beam]
    for bad in (-0.1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="channel's weight must be >= 0"):
            channel_rerank(forward, _Reverse({}), LINES, weight=bad)


def test_a_real_reverse_model_reranks_through_the_cli(tmp_path):
    """`translate --channel MODEL --channel-weight W`: the CLI's best is `channel_rerank`'s best
    with the same models and weight; --n-best lists the re-ranked candidates with their sums."""
    from transduce.decoding.translate import Translator

    model = save_toy_model(tmp_path, DECODE)
    reverse_dir = tmp_path / "reverse"
    reverse_dir.mkdir()
    reverse = save_toy_model(reverse_dir, DECODE)  # the same toy, as a stand-in reverse model
    source, out = write_lines(tmp_path / "in.txt", LINES), tmp_path / "out.txt"
    flags = ["--model", model, "--input", source, "--output", out, "--channel", reverse]
    main(["translate", *map(str, flags), "--channel-weight", "0.5"])
    expected = channel_rerank(Translator.load(model), Translator.load(reverse), LINES, 0.5)
    assert out.read_text().splitlines() == [hyps[0][0] for hyps in expected]
    main(["translate", *map(str, flags), "--channel-weight", "0.5", "--n-best", "2"])
    rows = [line.split(" ||| ") for line in out.read_text().splitlines()]
    assert [r[0] for r in rows] == ["0", "0", "1", "2", "2", "3", "3"]
    assert [float(r[2]) for r in rows if r[0] == "0"] == pytest.approx(
        [s for _, s in expected[0][:2]], abs=1e-4
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--channel-weight", "0.3"], "--channel-weight weighs --channel's model: add --channel"),
        (["--channel", "{model}", "--sampling"], "--channel re-ranks the beam's candidates"),
        (["--channel", "{model}", "--alignments"], "--channel re-ranks the beam's candidates"),
        (["--channel", "{model}", "--channel-weight", "-1"], "channel's weight must be >= 0"),
    ],
)
def test_contradicting_flags_are_refused_named(tmp_path, flags, message):
    model = save_toy_model(tmp_path, DECODE)
    source = write_lines(tmp_path / "in.txt", LINES)
    flags = [flag.format(model=model) for flag in flags]
    with pytest.raises(SystemExit, match=message):
        main(["translate", "--model", str(model), "--input", str(source), *flags])


def test_the_server_reranks_with_its_channel_model(tmp_path):
    """`serve --channel`: a request with `channel_weight` gets what `channel_rerank` gives
    offline (merged with another of the same weight), one without it the beam's own; the
    weight is refused, 422, by a server without a channel, and with sampling or alignments."""
    httpx = pytest.importorskip("httpx", reason="the dev extra")
    pytest.importorskip("fastapi", reason="the serve extra")
    from concurrent.futures import ThreadPoolExecutor

    from transduce.decoding.translate import Translator
    from transduce.serve.engine import Engine
    from transduce.serve.server import Background
    from transduce.serve.settings import ServeSettings

    from .conftest import tiny_model

    forward = toy_translator(tmp_path, dtype=torch.float32)
    reverse_model = tiny_model(seed=9, vocab_size=forward.vocab.size)
    reverse = Translator(reverse_model.float(), forward.vocab, DECODE, forward.device)
    engine = Engine(forward, "toy", reverse=reverse, reverse_name="rev")
    decode = forward.decode
    lines = [line for line in LINES if line]
    offline = {w: channel_rerank(forward, reverse, lines, w, decode) for w in (5.0, 0.0)}
    offline[None] = forward.translate(lines)
    # Requests of each weight at once: merged only with their own weight's.
    five = {"channel_weight": 5.0}
    bodies = [{"texts": lines[:2], **five}, {"text": lines[2], **five},
              {"texts": lines, "channel_weight": 0.0}, {"texts": lines}]  # fmt: skip
    settings = ServeSettings(port=0, batch_wait_ms=100)
    with Background(engine, settings) as url, httpx.Client(base_url=url) as client:
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda b: client.post("/v1/translate", json=b).json(), bodies))
        for body, answer in zip(bodies, answers, strict=True):
            want = offline[body.get("channel_weight")]
            want = want[2:] if "text" in body else want[: len(answer["translations"])]
            assert [(t["text"], t["score"]) for t in answer["translations"]] == [
                (hyps[0][0], pytest.approx(hyps[0][1])) for hyps in want]  # fmt: skip
        assert [h[0][0] for h in offline[5.0]] != [h[0][0] for h in offline[None]]
        plain = client.post("/v1/translate", json={"texts": lines}).json()["translations"]
        assert [t["text"] for t in plain] == [h[0][0] for h in forward.translate(lines)]
        assert client.get("/v1/models").json()["models"][0]["channel"] == "rev"
        for body, says in [
            ({"text": "dog", "channel_weight": -1}, "greater than or equal"),
            ({"text": "dog", "channel_weight": 1, "alignments": True}, "leave out"),
            ({"text": "dog", "channel_weight": 1, "sampling": {}}, "leave out"),
        ]:
            answer = client.post("/v1/translate", json=body)
            assert answer.status_code == 422 and says in answer.text
    with Background(Engine(forward, "toy"), settings) as url, httpx.Client(base_url=url) as client:
        answer = client.post("/v1/translate", json={"text": "dog", "channel_weight": 0.1})
        assert answer.status_code == 422 and "no channel model" in answer.text


def test_serve_loads_the_channel_in_its_decoding_process(tmp_path):
    """`serve --channel` with the default process decoder: the child loads the reverse model
    too, and re-ranks as the thread decoder does."""
    pytest.importorskip("fastapi", reason="the serve extra")
    from transduce.serve.engine import Engine, TranslateWork
    from transduce.serve.worker import DecoderProcess

    model = save_toy_model(tmp_path)
    decoder = DecoderProcess(model, threads=1, channel=model)
    try:
        assert decoder.facts.channel == "toy.pt"
        work = TranslateWork(["the dog runs"], DECODE, False, channel_weight=2.0)
        here = Engine.load(model, channel=model).translate([work])
        assert decoder.translate([work]) == here
    finally:
        decoder.close()
