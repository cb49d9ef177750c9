"""Generated bodies (hypothesis) against the server's two POST endpoints: whatever arrives, the
answer is 200 with what was asked, or 400, 413 or 422 with a JSON message; never a 500, never a
hang, and the server answers a good request afterwards."""

from __future__ import annotations

import json

import pytest

httpx = pytest.importorskip("httpx", reason="the dev extra: pip install -e '.[dev]'")
hypothesis = pytest.importorskip("hypothesis", reason="the dev extra: pip install -e '.[dev]'")
pytest.importorskip("fastapi", reason="the serve extra: pip install -e '.[serve]'")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from transduce.serve.server import Background  # noqa: E402
from transduce.serve.settings import ServeSettings  # noqa: E402

from .conftest import TOY_WORDS  # noqa: E402
from .serving import toy_engine  # noqa: E402

# Small limits, so that generated options stay cheap to decode or are refused.
LIMITS = ServeSettings(
    port=0, max_beam=3, max_len_b=6, max_sentences=4, max_sentence_tokens=24, max_body_bytes=4096
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=6,
)
words = st.sampled_from(TOY_WORDS)
sentences = st.lists(words, min_size=1, max_size=6).map(" ".join)
edge_ints = st.integers(-2, 8)
edge_texts = st.one_of(st.text(max_size=30), st.just(""), st.just(" "), json_values)
# Per endpoint and field: a value the schema accepts, and one that may well be wrong.
FIELDS = {
    "/v1/translate": {
        "text": (sentences, edge_texts),
        "texts": (st.lists(sentences, min_size=1, max_size=5), st.lists(edge_texts, max_size=6)),
        "beam_size": (st.integers(1, 3), edge_ints),
        "n_best": (st.just(1), edge_ints),
        "max_len_b": (st.integers(1, 6), edge_ints),
        "alignments": (st.booleans(), json_values),
        # What guides the output: starts, terms, an avoid list, a glossary; and samples, and a
        # channel this server does not have.
        "prefix": (words.map(lambda w: w[: len(w) // 2]), edge_texts),
        "terms": (st.lists(words, max_size=2), st.one_of(st.lists(edge_texts), json_values)),
        "term_lists": (st.lists(st.lists(words, max_size=2), max_size=3), json_values),
        "avoid": (st.lists(words, max_size=3), st.one_of(st.lists(edge_texts), json_values)),
        "glossary": (st.dictionaries(words, words, max_size=3), json_values),
        "sampling": (st.fixed_dictionaries({"samples": st.integers(1, 2)}), json_values),
        "channel_weight": (st.floats(0, 1), json_values),
    },
    "/v1/attention": {
        "text": (sentences, edge_texts),
        "target": (sentences, edge_texts),
        "beam_size": (st.integers(1, 3), edge_ints),
        "merge_words": (st.booleans(), json_values),
        "layer": (st.integers(0, 1), edge_ints),
    },
}


GUIDES = ("prefix", "terms", "term_lists", "avoid", "glossary", "sampling", "channel_weight")


@st.composite
def bodies(draw) -> tuple[str, bytes]:
    """An endpoint and a body: each field absent, good or doubtful (so that one mistake is
    often alone, and reached), maybe a stray field; or any JSON; or JSON damaged; or bytes."""
    path = draw(st.sampled_from(sorted(FIELDS)))
    near = {}
    one_text = "text" if path == "/v1/attention" else draw(st.sampled_from(["text", "texts"]))
    for name, (good, doubtful) in FIELDS[path].items():
        if name == one_text:
            odds = ["good", "good", "good", "doubtful"]
        elif name in ("text", "texts"):  # the other one: seldom both
            odds = ["absent", "absent", "absent", "good"]
        elif name in GUIDES:  # one now and then, so that most bodies can still be served
            odds = ["absent"] * 5 + ["good", "good", "doubtful"]
        else:
            odds = ["absent", "good", "good", "doubtful"]
        choice = draw(st.sampled_from(odds))
        if choice != "absent":
            near[name] = draw(good if choice == "good" else doubtful)
    kind = draw(st.sampled_from(["near", "near", "near", "stray", "any", "damaged", "bytes"]))
    if kind == "stray":  # a field the schema does not have
        near[draw(st.text(max_size=8))] = draw(json_values)
    body = json.dumps(near).encode()
    if kind == "any":
        body = json.dumps(draw(json_values)).encode()
    elif kind == "damaged":
        cut = draw(st.integers(0, len(body)))
        body = body[:cut] + draw(st.binary(max_size=4)) + body[cut + 1 :]
    elif kind == "bytes":
        body = draw(st.binary(max_size=64))
    return path, body


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    engine = toy_engine(tmp_path_factory.mktemp("fuzz"))
    with Background(engine, LIMITS) as url, httpx.Client(base_url=url, timeout=60) as client:
        yield client


# Each numeric option at zero and below, for certain; the rest is generated.
EDGES = [
    (path, json.dumps({"text": "the dog", name: value}).encode())
    for path, fields in sorted(FIELDS.items())
    for value in (0, -1)
    for name, (_, doubtful) in fields.items()
    if doubtful is edge_ints
]


@settings(max_examples=150, deadline=None, database=None)
@given(request=bodies())
def test_any_body_gets_an_answer_or_a_4xx_with_a_message(client, request):
    path, body = request
    answer = client.post(path, content=body, headers={"content-type": "application/json"})
    assert answer.status_code in (200, 400, 413, 422), answer.text
    found = answer.json()
    if answer.status_code != 200:
        assert isinstance(found["detail"], str) and found["detail"]
    elif path == "/v1/translate":
        asked = json.loads(body)
        lines = [asked["text"]] if "text" in asked else asked["texts"]
        assert len(found["translations"]) == len(lines)
        drawn = (asked.get("sampling") or {}).get("samples")
        outputs = drawn or asked.get("n_best", 1)
        assert all(len(t["n_best"]) == outputs for t in found["translations"])
    else:
        assert "cross" in found["views"]


@pytest.mark.parametrize(("path", "body"), EDGES)
def test_options_at_zero_or_below_get_422_except_a_layer_of_zero(client, path, body):
    answer = client.post(path, content=body, headers={"content-type": "application/json"})
    valid = json.loads(body).get("layer") == 0
    assert answer.status_code == (200 if valid else 422), answer.text


def test_the_server_still_serves_after_the_fuzzing(client):  # runs after it: file order
    assert client.get("/health").json()["status"] == "ok"
    answer = client.post("/v1/translate", json={"text": "the dog runs"})
    assert answer.status_code == 200
    metrics = client.get("/metrics").text
    assert 'status="500"' not in metrics
