"""The page at `/` in headless Chromium (Debian's, driven by Playwright; no browser download):
type a sentence, choose the beam, see the translation and the attention view, and nothing is
fetched from anywhere but the server itself."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("fastapi", reason="the serve extra: pip install -e '.[serve]'")

from transduce.serve.server import Background
from transduce.serve.settings import ServeSettings

from .conftest import save_toy_model
from .serving import DECODE, toy_engine

SENTENCE = "the children playing outside"


def _opened(browser, url: str, errors: list[str], **options):
    """The page at `url`, its script's errors collected into `errors`."""
    page = browser.new_page(**options)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(url + "/")
    return page


def test_the_page_translates_and_draws_the_attention_offline(browser, tmp_path):
    engine = toy_engine(tmp_path)
    expected = engine.translator.translate([SENTENCE], replace(DECODE, beam_size=3))[0][0][0]
    with Background(engine, ServeSettings(port=0, max_beam=6)) as url:
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        errors, asked = [], []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("request", lambda request: asked.append(request.url))
        page.goto(url + "/")
        beams = page.eval_on_selector_all("#beam option", "os => os.map(o => o.value)")
        assert beams == [str(k) for k in range(1, 7)]
        assert page.input_value("#beam") == str(DECODE.beam_size)  # the model's own
        page.fill("#text", SENTENCE)
        page.select_option("#beam", "3")
        page.click("#go")
        page.wait_for_selector("#translations li .output")
        page.wait_for_selector("#attention:not([hidden])")
        page.wait_for_selector("#links line", state="attached")  # a line may be hair-thin
        assert page.inner_text("#translations li .output") == expected
        assert page.inner_text("#source") == SENTENCE  # the attention view's own elements
        assert page.inner_text("#target") == expected
        assert [w for w in SENTENCE.split() if w not in page.text_content("#lines")] == []
        assert page.locator("#heatmap rect.cell").count() > 0
        page.click("#heads button[data-head='1']")  # the view is interactive
        assert page.inner_text("#lines-title").endswith("head 1")
        assert "beam 3" in page.inner_text("#status")
        page.screenshot(path=str(tmp_path / "serve.png"), full_page=True)
    assert errors == []
    assert asked and all(address.startswith(url + "/") for address in asked)  # no network
    assert {a.removeprefix(url) for a in asked} >= {"/", "/v1/translate", "/v1/attention"}


def test_the_page_names_a_bad_request_instead_of_failing(browser, tmp_path):
    with Background(toy_engine(tmp_path), ServeSettings(port=0, max_sentence_tokens=5)) as url:
        page = browser.new_page()
        page.goto(url + "/")
        page.click("#go")
        assert "Type a sentence" in page.inner_text("#status")
        page.fill("#text", "the children playing outside across green grass")
        page.click("#go")
        page.wait_for_selector("#status.error >> text=413")
        assert page.locator("#translations li").count() == 0


def test_one_translation_at_a_time_and_a_refused_click_is_named(browser, tmp_path):
    """The button waits for its answer (an older one could otherwise land after a newer), and a
    click whose attention is refused says so in the status line, even when the refusal is not
    the server's JSON (a proxy's 503 page), instead of failing silently."""
    with Background(toy_engine(tmp_path), ServeSettings(port=0)) as url:
        page = browser.new_page()
        errors, held, attention_calls = [], [], []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.route("**/v1/translate", lambda route: held.append(route))  # answered below

        def attention(route):
            attention_calls.append(route)
            if len(attention_calls) == 1:
                route.continue_()
            else:
                route.fulfill(status=503, body="<html>busy</html>", content_type="text/html")

        page.route("**/v1/attention", attention)
        page.goto(url + "/")
        page.fill("#text", "the dog runs\nthe children")
        page.click("#go")
        page.wait_for_function("() => document.getElementById('go').disabled")
        assert held and page.is_disabled("#go")
        held[0].continue_()
        page.wait_for_selector("#attention:not([hidden])")
        assert page.is_enabled("#go") and "beam" in page.inner_text("#status")
        page.click("#translations li[data-index='1']")
        page.wait_for_selector("#status.error >> text=503")
    assert errors == [] and len(attention_calls) == 2


def test_the_page_completes_a_typed_start_of_the_translation(browser, tmp_path):
    """A start typed into the prefix field: the translation shown is the model's completion of
    it (what `Translator.translate` gives with that prefix) and the attention drawn is that
    translation's, not the model's own choice; a start with several lines is refused, named."""
    engine = toy_engine(tmp_path)
    prefix = "green grass "  # the final space asks for a new word: the page must keep it
    expected = engine.translator.translate([SENTENCE], prefixes=[prefix])[0][0][0]
    unfinished = engine.translator.translate([SENTENCE], prefixes=[prefix.strip()])[0][0][0]
    own = engine.translator.translate([SENTENCE])[0][0][0]
    assert expected.startswith(prefix) and not own.startswith(prefix) and unfinished != expected
    with Background(engine, ServeSettings(port=0)) as url:
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        errors, bodies = [], []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("request", lambda request: bodies.append(request.post_data or ""))
        page.goto(url + "/")
        page.fill("#text", SENTENCE)
        page.fill("#prefix", prefix)
        page.click("#go")
        page.wait_for_selector("#attention:not([hidden])")
        assert page.inner_text("#translations li .output") == expected
        assert page.inner_text("#target") == expected  # the attention of the shown translation
        assert any(f'"prefix":"{prefix}"' in body for body in bodies)  # the space sent too
        page.screenshot(path=str(tmp_path / "prefix.png"), full_page=True)
        page.fill("#text", SENTENCE + "\nthe dog runs")
        page.click("#go")
        page.wait_for_selector("#status.error >> text=one sentence")
    assert errors == []


def test_the_page_cuts_a_weak_model_s_loops(browser, tmp_path):
    """The box "no repeats" checked: the translation shown is `Translator.translate`'s without a
    repeated 4-gram, its attention drawn is its own; unchecked, the model's own loop again."""
    from transduce.serve.engine import Engine

    engine = Engine.load(save_toy_model(tmp_path, replace(DECODE, max_len_b=12)))
    own = engine.translator.translate([SENTENCE])[0][0][0]
    rule = replace(engine.translator.decode, no_repeat_ngram=4)
    cut = engine.translator.translate([SENTENCE], rule)[0][0][0]
    assert cut != own
    with Background(engine, ServeSettings(port=0)) as url:
        errors = []
        page = _opened(browser, url, errors, viewport={"width": 1300, "height": 900})
        assert not page.is_checked("#no-repeats")  # the run's own: off
        assert _translated_with_the_box(page, True) == (cut, cut)
        assert "no 4-gram twice" in page.inner_text("#status")
        page.screenshot(path=str(tmp_path / "no-repeats.png"), full_page=True)
        page.uncheck("#no-repeats")
        page.click("#go")
        page.wait_for_selector(f"#translations li .output >> text='{own}'")
        page.wait_for_selector(f"#target >> text='{own}'")
    # A run whose own search has the rule (n = 2): checked; unchecked, the attention drawn is
    # still the translation's shown, not the run's own search's.
    (tmp_path / "ruled").mkdir()
    ruled = Engine.load(save_toy_model(tmp_path / "ruled", replace(rule, no_repeat_ngram=2)))
    with Background(ruled, ServeSettings(port=0)) as url:
        page = _opened(browser, url, errors, viewport={"width": 1300, "height": 900})
        assert page.is_checked("#no-repeats")
        assert _translated_with_the_box(page, False) == (own, own)
    assert errors == []


def _translated_with_the_box(page, checked: bool) -> tuple[str, str]:
    """SENTENCE translated on a fresh page with "no repeats" as given: the translation shown
    and the target of the attention drawn."""
    page.fill("#text", SENTENCE)
    page.set_checked("#no-repeats", checked)
    page.click("#go")
    page.wait_for_selector("#attention:not([hidden])")
    return page.inner_text("#translations li .output"), page.inner_text("#target")


def test_the_page_translates_with_terms(browser, tmp_path):
    """Terms typed into their field, separated by ';' (blanks dropped): the beam becomes the
    run's terms beam (unless one was chosen by hand), the translation shown is what
    `Translator.translate` gives with them at that beam, holding each, and the attention drawn
    is its own; terms with several lines are refused, named."""
    engine = toy_engine(tmp_path)
    terms = ["green grass", "outside"]
    wide = replace(DECODE, beam_size=DECODE.terms_beam, terms_beam=0)
    expected = engine.translator.translate([SENTENCE], wide, terms=[terms])[0][0][0]
    own = engine.translator.translate([SENTENCE])[0][0][0]
    assert expected != own and all(term in expected for term in terms)
    with Background(engine, ServeSettings(port=0)) as url:
        errors = []
        page = _opened(browser, url, errors, viewport={"width": 1300, "height": 900})
        page.fill("#text", SENTENCE)
        page.fill("#terms", " green grass ;outside; ")
        assert page.input_value("#beam") == str(DECODE.terms_beam)
        page.click("#go")
        page.wait_for_selector("#attention:not([hidden])")
        assert page.inner_text("#translations li .output") == expected
        assert page.inner_text("#target") == expected
        page.screenshot(path=str(tmp_path / "terms.png"), full_page=True)
        page.fill("#terms", " ; ")
        assert page.input_value("#beam") == str(DECODE.beam_size)  # no terms: the model's own
        page.select_option("#beam", "3")
        page.fill("#terms", "outside")
        assert page.input_value("#beam") == "3"  # chosen by hand: kept
        page.fill("#text", SENTENCE + "\nthe dog runs")
        page.click("#go")
        page.wait_for_selector("#status.error >> text=Terms go with one sentence")
    assert errors == []


def test_typing_a_start_translates_and_tab_accepts_the_next_word(browser, tmp_path):
    """Interactive translation on the page: typed letter by letter, the start's completion
    appears without a click once typing pauses; Tab accepts the completion's next word, which
    becomes the start (with a space), and the completion follows it."""
    engine = toy_engine(tmp_path)
    typed = "gr"
    completion = engine.translator.translate([SENTENCE], prefixes=[typed])[0][0][0]
    accepted = completion.split()[0] + " "
    after = engine.translator.translate([SENTENCE], prefixes=[accepted])[0][0][0]
    with Background(engine, ServeSettings(port=0)) as url:
        errors = []
        page = _opened(browser, url, errors)
        page.fill("#text", SENTENCE)
        page.type("#prefix", typed, delay=50)  # key by key, as a person types
        page.wait_for_function(
            "want => document.querySelector('#translations li .output')?.textContent === want",
            arg=completion,
        )
        page.press("#prefix", "Tab")
        assert page.input_value("#prefix") == accepted
        page.wait_for_function(
            "want => document.querySelector('#translations li .output')?.textContent === want",
            arg=after,
        )
        assert page.evaluate("document.activeElement.id") == "prefix"  # Tab was taken
    assert errors == [] and after.startswith(accepted.strip())
