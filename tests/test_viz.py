"""Attention views: the captured weights are distributions that leave the translation alone, the
PNG figures are drawn, and the HTML page works in a real browser; for the Transformer and for a
family with only cross attention (the scripted fake), through the same code."""

import importlib
import json
from dataclasses import replace
from pathlib import Path

import matplotlib.image
import pytest
import torch

from transduce.cli import main
from transduce.viz import figures as figures_module
from transduce.viz import views
from transduce.viz.capture import SentenceAttention, best_translations, capture, sentence_attention
from transduce.viz.page import fill, render_page, script_json
from transduce.viz.views import attention_views
from transduce.viz.words import group_pieces, merge_weights

from .conftest import BOS, EOS, PAD, save_toy_model, tiny_model, tiny_rnn, toy_translator
from .fakes import ScriptedSeq2Seq

SENTENCE = "the children playing outside"  # "outside" is several pieces in the toy BPE


def _family(name: str, vocab_size: int = 12):
    if name == "transformer":
        return tiny_model(vocab_size=vocab_size)
    if name == "rnn":  # the LSTM with attention: cross attention only, its alpha_ij
        return tiny_rnn(vocab_size=vocab_size)
    return ScriptedSeq2Seq(vocab_size=vocab_size, seed=1)


def _translator(name: str, folder: Path):
    return toy_translator(folder, model=_family(name, vocab_size=60))


@pytest.mark.parametrize("family", ["transformer", "rnn", "scripted"])
def test_captured_attention_is_a_distribution_over_real_positions(family):
    model = _family(family)
    src = torch.tensor([[5, 6, 7, 8, EOS], [9, 4, EOS, PAD, PAD]])  # (B, S), padded
    tgt_in = torch.tensor([[BOS, 4, 5, 6], [BOS, 7, PAD, PAD]])  # (B, T)
    maps = capture(model, src, tgt_in)
    src_real, tgt_real = src != PAD, tgt_in != PAD
    sides = {
        "encoder_self": (src_real, src_real),
        "decoder_self": (tgt_real, tgt_real),
        "decoder_cross": (tgt_real, src_real),
    }
    kinds = [kind for kind in sides if getattr(maps, kind)]
    assert kinds == (list(sides) if family == "transformer" else ["decoder_cross"])
    for kind in kinds:
        queries, keys = sides[kind]
        for weights in getattr(maps, kind):  # (B, h, Tq, Tk), one per layer
            for b in range(src.size(0)):
                rows = weights[b][:, queries[b]]  # every head, the real queries
                assert torch.allclose(rows.sum(-1), torch.ones_like(rows.sum(-1)), atol=1e-9)
                assert (rows[..., ~keys[b]] == 0).all()


def test_a_sentence_is_read_as_translate_reads_it_without_the_spaces_around_it(tmp_path):
    translator = _translator("transformer", tmp_path)
    padded = sentence_attention(translator, "  the dog \t", "  a dog  ")
    plain = sentence_attention(translator, "the dog", "a dog")
    assert (padded.labels, padded.source, padded.translation) == (
        plain.labels,
        plain.source,
        plain.translation,
    )


def test_an_empty_sentence_is_refused_not_drawn(tmp_path):
    translator = _translator("transformer", tmp_path)
    for sentence in ("", " \t "):
        with pytest.raises(ValueError, match="the sentence is empty"):
            sentence_attention(translator, sentence)


def test_the_search_settings_asked_for_make_the_translation(tmp_path, monkeypatch):
    capture_module = importlib.import_module(
        "transduce.viz.capture"
    )  # the module, not the function
    real, seen = capture_module.decode_ids, []

    def spy(model, vocab, sources, settings, *rest):
        seen.append(settings)
        # the translator's own weights, packed or int8: the translation `translate` gives
        assert rest == (translator.device, translator.packed_weights, translator.int8_weights)
        return real(model, vocab, sources, settings, *rest)

    monkeypatch.setattr(capture_module, "decode_ids", spy)
    translator = _translator("transformer", tmp_path)
    greedy = replace(translator.decode, beam_size=1, alpha=0.0, n_best=1)
    best_translations(translator, [[5, 6]], greedy)
    best_translations(translator, [[5, 6]])
    assert seen == [greedy, replace(translator.decode, n_best=1)]


def test_maps_of_a_bfloat16_model_come_back_in_float32():
    model = tiny_model(vocab_size=12).to(torch.bfloat16)
    maps = capture(model, torch.tensor([[5, 6, EOS]]), torch.tensor([[BOS, 4]]))
    kinds = ("encoder_self", "decoder_self", "decoder_cross")
    assert {w.dtype for kind in kinds for w in getattr(maps, kind)} == {torch.float32}


def test_each_kind_is_labelled_with_its_own_queries_and_keys(tmp_path):
    """The decoder reads <s> and the target; cross attention's rows predict the target and
    </s>; the encoder reads the source and </s>."""
    attention = sentence_attention(_translator("transformer", tmp_path), "the dog", "a dog")
    decoder_queries, decoder_keys = attention.labels["decoder"]
    predicting, source = attention.labels["cross"]
    assert decoder_queries == decoder_keys and decoder_queries[0] == "<s>"
    assert predicting == [*decoder_queries[1:], "</s>"]
    assert attention.labels["encoder"] == (source, source) and source[-1] == "</s>"


@pytest.mark.parametrize("family", ["transformer", "rnn", "scripted"])
@pytest.mark.parametrize("merge_words", [False, True])
def test_a_sentences_maps_keep_their_rows_distributions(family, merge_words, tmp_path):
    attention = sentence_attention(_translator(family, tmp_path), SENTENCE, None, merge_words)
    source_words = attention.labels["cross"][1]
    if merge_words:
        assert source_words == [*SENTENCE.split(), "</s>"]
    else:  # the pieces as the vocabulary writes them: "outside" is several
        assert len(source_words) > len(SENTENCE.split()) + 1 and source_words[0] == "▁the"
    for kind, layers in attention.layers.items():
        queries, keys = attention.labels[kind]
        for weights in layers:
            assert weights.shape[1:] == (len(queries), len(keys))
            assert torch.allclose(
                weights.sum(-1), torch.ones(weights.shape[:2], dtype=weights.dtype), atol=1e-9
            )


@pytest.mark.parametrize("family", ["transformer", "rnn", "scripted"])
def test_capturing_attention_leaves_the_translation_bit_identical(family, tmp_path):
    translator = _translator(family, tmp_path)
    lines = [SENTENCE, "the dog runs across green grass"]
    before = translator.translate(lines)
    attention = [sentence_attention(translator, line) for line in lines]
    after = translator.translate(lines)
    assert after == before
    assert [a.translation for a in attention] == [hyps[0][0] for hyps in before]


def test_merging_sums_over_a_words_keys_and_averages_over_its_queries():
    words = group_pieces(["▁a", "▁do", "g", "</s>"])
    assert words.labels == ["a", "dog", "</s>"] and words.groups == [[0], [1, 2], [3]]
    weights = torch.tensor(
        [[0.1, 0.2, 0.3, 0.4], [0.5, 0.1, 0.1, 0.3], [0.3, 0.3, 0.3, 0.1], [0.0, 0.5, 0.5, 0.0]]
    )
    expected = torch.tensor(
        [
            [0.1, 0.2 + 0.3, 0.4],  # "a": one query, the pieces of "dog" summed
            [(0.5 + 0.3) / 2, (0.2 + 0.6) / 2, (0.3 + 0.1) / 2],  # "dog": its two rows averaged
            [0.0, 1.0, 0.0],
        ]
    )
    torch.testing.assert_close(merge_weights(weights, words, words), expected)


def test_special_pieces_are_words_of_their_own_on_either_side():
    """A piece without "▁" joins no special before it, and no special joins a word."""
    words = group_pieces(["<s>", "ing", "▁a", "<unk>", "</s>"])
    assert words.labels == ["<s>", "ing", "a", "<unk>", "</s>"]
    assert words.groups == [[0], [1], [2], [3], [4]]


def _image(path: Path):
    pixels = matplotlib.image.imread(path)  # (height, width, channels) floats in [0, 1]
    assert pixels.std() > 0.05, f"{path.name} looks blank"
    rgb = pixels[..., :3]
    assert (rgb < 0.9).any(-1).mean() > 0.01, f"{path.name} is nearly all white"
    # the weights are drawn in colour (head colours, viridis); frames and labels are grey
    colourful = (rgb.max(-1) - rgb.min(-1) > 0.25).mean()
    assert colourful > 0.005, f"{path.name} has no weights drawn"
    return pixels.shape[:2]


def test_the_figures_are_drawn_for_every_kind_of_attention(tmp_path):
    translator = toy_translator(tmp_path)
    written = attention_views(translator, SENTENCE, tmp_path / "out", layer=1, merge_words=True)
    names = sorted(p.name for p in written)
    kinds = ["cross", "decoder", "encoder"]
    expected = [f"{k}_{f}.png" for k in kinds for f in ("grid", "heatmap")] + ["encoder_lines.png"]
    assert names == sorted([*expected, "attention.html"])
    words, heads = len(SENTENCE.split()) + 1, 2
    # lines_figure: 0.45 inch a word (6 at least) by 2.6 inches a panel (all heads, then each)
    assert _image(tmp_path / "out/encoder_lines.png") == (260 * (heads + 1), 100 * max(6, words))
    for name in names:
        if name.endswith(".png"):
            height, width = _image(tmp_path / "out" / name)
            assert height >= 350 and width >= 400


def test_each_stack_is_drawn_at_its_own_layer_where_the_decoder_is_shallower(tmp_path, monkeypatch):
    """With 3 encoder layers and 1 decoder layer, the default is each stack's penultimate (or
    only) layer, a layer asked for is each stack's own or its last, and only a layer past the
    deepest stack is refused."""
    model = tiny_model(n_layers=3, n_decoder_layers=1, vocab_size=60)
    titles = {
        "encoder": "encoder self-attention",
        "decoder": "decoder self-attention",
        "cross": "encoder-decoder attention",
    }
    attention = sentence_attention(toy_translator(tmp_path, model=model), SENTENCE)
    drawn = {}

    def heatmap(mean, queries, keys, path, title, names):
        drawn[path.stem] = (mean, title, (queries, keys))
        return path

    monkeypatch.setattr(views, "heatmap_figure", heatmap)
    monkeypatch.setattr(views, "lines_figure", lambda w, labels, at, path: drawn.update(lines=at))

    def grid(layers, queries, keys, path, title):  # the grids' labels: as the heatmaps'
        drawn[path.stem] = (queries, keys)

    monkeypatch.setattr(views, "grid_figure", grid)
    monkeypatch.setattr(views, "write_page", lambda a, at, path: drawn.update(page=at))
    for asked, encoder_layer, page_layer in ((None, 1, 1), (2, 2, 2), (0, 0, 0)):
        views.draw_attention(attention, tmp_path, layer=asked)
        at = {"encoder": encoder_layer, "decoder": 0, "cross": 0}
        for kind, layer in at.items():
            mean, title, labels = drawn[f"{kind}_heatmap"]
            assert title.startswith(f"{titles[kind]}, layer {layer},")
            assert torch.equal(mean, attention.layers[kind][layer].mean(dim=0))
            assert labels == attention.labels[kind]  # (queries, keys): rows, then columns
            assert drawn[f"{kind}_grid"] == attention.labels[kind]
        assert (drawn["lines"], drawn["page"]) == (encoder_layer, page_layer)
    with pytest.raises(ValueError, match="layers 0 to 2"):
        views.draw_attention(attention, tmp_path, layer=3)
    # beside another model, the decoder's penultimate (here its only) layer
    monkeypatch.setattr(views, "side_by_side_figure", lambda panels, *_: drawn.update(p=panels))
    target, translator = attention.translation, toy_translator(tmp_path, model=model)
    views.side_by_side([("T", translator)], SENTENCE, tmp_path / "s.png", target=target)
    own = sentence_attention(translator, SENTENCE, target, merge_words=True)
    assert torch.equal(drawn["p"][0][0], own.layers["cross"][0].mean(dim=0))


def test_lines_go_from_each_query_above_to_its_keys_below_one_colour_a_head(monkeypatch):
    """Figures 3-5: a line from word q in the upper row to word k in the lower one for each
    weight above 0.05, 4 x the weight wide; each head's own colour and panel. The heatmap's
    brightest colour is its largest weight."""
    from transduce.viz import figures

    weights = torch.zeros(2, 3, 3)
    weights[0, 0, 2], weights[0, 2, 0], weights[0, 1, 1] = 0.9, 0.3, 0.04  # the last too faint
    weights[1, 1, 0] = 0.5
    drawn = []
    monkeypatch.setattr(figures_module, "_save", lambda figure, path: drawn.append(figure) or path)
    figures.lines_figure(weights, ["a", "b", "c"], 0, Path("lines.png"))
    colours = [figures.head_colour(0), figures.head_colour(1)]
    assert colours[0] != colours[1]

    def lines(ax):
        return [
            (tuple(line.get_xdata()), tuple(line.get_ydata()), line.get_color(), line.get_lw())
            for line in ax.lines
        ]

    width = [4 * float(torch.tensor(w)) for w in (0.9, 0.3, 0.5)]  # 4 x the float32 weight
    head_0 = [((0, 2), (1, 0), colours[0], width[0]), ((2, 0), (1, 0), colours[0], width[1])]
    head_1 = [((1, 0), (1, 0), colours[1], width[2])]
    all_heads, *each_head = drawn[0].axes
    assert lines(all_heads) == head_0 + head_1
    assert [lines(ax) for ax in each_head] == [head_0, head_1]
    queries, keys = ["q0", "q1", "q2"], ["k0", "k1", "k2"]
    figures.heatmap_figure(weights[0], queries, keys, Path("h.png"), "t", "query / key")
    heatmap = drawn[1].axes[0]
    assert heatmap.images[0].get_clim() == pytest.approx((0.0, 0.9))
    assert [t.get_text() for t in heatmap.get_xticklabels()] == keys  # columns: the keys
    assert [t.get_text() for t in heatmap.get_yticklabels()] == queries
    assert (heatmap.get_ylabel(), heatmap.get_xlabel()) == ("query", "key")
    figures.grid_figure([weights, weights.flip(0)], queries, keys, Path("g.png"), "t")
    cells = [torch.tensor(ax.images[0].get_array()) for ax in drawn[2].axes]
    expected = [weights[0], weights[1], weights[1], weights[0]]  # layer by layer, head by head
    assert all(torch.equal(c, e) for c, e in zip(cells, expected, strict=True))


def test_a_family_with_only_cross_attention_gets_only_that_view(tmp_path):
    translator = _translator("scripted", tmp_path)
    written = attention_views(translator, SENTENCE, tmp_path / "out")
    assert sorted(p.name for p in written) == [
        "attention.html",
        "cross_grid.png",
        "cross_heatmap.png",
    ]
    data = _page_data(tmp_path / "out/attention.html")
    assert list(data["views"]) == ["cross"]


def test_page_text_cannot_end_its_script_nor_fill_a_placeholder():
    """A sentence may hold "</script>" or a placeholder's name: neither changes the page."""
    inline = script_json({"source": "a </script> b"})
    assert "</" not in inline and json.loads(inline) == {"source": "a </script> b"}
    assert fill("__A__ and __B__", {"A": "__B__", "B": "x"}) == "__B__ and x"
    attention = SentenceAttention("a <b> & c", "t", {}, {})
    assert "<title>Attention: a &lt;b&gt; &amp; c</title>" in render_page(attention, 0)


def _page_data(path: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    opening = '<script id="data" type="application/json">'
    start = text.index(opening) + len(opening)
    return json.loads(text[start : text.index("</script>", start)])


def test_the_page_is_self_contained(tmp_path):
    translator = toy_translator(tmp_path)
    attention_views(translator, SENTENCE, tmp_path / "out", layer=1)  # not the default, 0
    text = (tmp_path / "out/attention.html").read_text(encoding="utf-8")
    for outside in ("<link", "src=", "href=", "@import", "url(", "fetch(", "XMLHttpRequest"):
        assert outside not in text
    urls = {word for word in text.replace('"', " ").split() if "://" in word}
    assert urls == {"http://www.w3.org/2000/svg"}  # a namespace name, never fetched
    data = _page_data(tmp_path / "out/attention.html")
    assert data["source"] == SENTENCE and set(data["views"]) == {"encoder", "decoder", "cross"}
    assert data["layer"] == 1  # the layer the page shows first
    axes = {kind: (view["queryName"], view["keyName"]) for kind, view in data["views"].items()}
    assert axes == {
        "encoder": ("source (query)", "source (key)"),
        "decoder": ("target input (query)", "target input (key)"),
        "cross": ("target (predicting)", "source"),
    }
    drawn = torch.tensor(data["views"]["cross"]["layers"][1], dtype=torch.float64)
    captured = sentence_attention(translator, SENTENCE).layers["cross"][1].double()
    torch.testing.assert_close(drawn, captured, atol=5e-5, rtol=0)  # to 4 decimals


def test_the_attention_verb_draws_a_saved_model(tmp_path, capsys):
    model = save_toy_model(tmp_path)
    main(["attention", "--model", str(model), "--sentence", SENTENCE, "--out", str(tmp_path / "o"),
          "--merge-words", "--layer", "0"])  # fmt: skip
    printed = capsys.readouterr().out.split()
    assert len(printed) == 8 and all(Path(p).exists() for p in printed)
    with pytest.raises(SystemExit, match="layers 0 to 1"):
        main(["attention", "--model", str(model), "--sentence", SENTENCE, "--out",
              str(tmp_path / "o"), "--layer", "2"])  # fmt: skip


def _open(browser, path: Path):
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(path.as_uri())
    return page, errors


def _links(page) -> list[tuple[str, str]]:
    return page.eval_on_selector_all(
        "#links line", "lines => lines.map(l => [l.dataset.head, l.getAttribute('y1')])"
    )


def test_the_page_shows_the_sentence_and_redraws_for_a_head_and_a_word(browser, tmp_path):
    attention_views(toy_translator(tmp_path), SENTENCE, tmp_path / "out", merge_words=True)
    page, errors = _open(browser, tmp_path / "out/attention.html")
    assert page.inner_text("#source") == SENTENCE
    assert [w for w in SENTENCE.split() if w not in page.text_content("#lines")] == []
    every_head = _links(page)
    assert {head for head, _ in every_head} == {"0", "1"}
    heatmap = page.inner_html("#heatmap")
    page.click("#heads button[data-head='1']")
    assert {head for head, _ in _links(page)} == {"1"}
    assert page.inner_text("#lines-title").endswith("head 1")
    assert page.inner_html("#heatmap") != heatmap
    page.hover("#lines text.word >> nth=2")  # one query word: only its lines
    assert len({y for _, y in _links(page)}) == 1
    page.mouse.move(0, 0)  # away from the word: every query again
    shown = page.inner_html("#links")
    page.select_option("#layer", "1")
    assert "layer 1," in page.inner_text("#lines-title") and page.inner_html("#links") != shown
    page.click("#kinds button[data-kind='cross']")
    assert page.inner_text("#lines-title").startswith("encoder-decoder attention")
    assert errors == []


def test_the_page_of_a_cross_attention_family_offers_only_that_view(browser, tmp_path):
    attention_views(_translator("scripted", tmp_path), SENTENCE, tmp_path / "out")
    page, errors = _open(browser, tmp_path / "out/attention.html")
    kinds = page.eval_on_selector_all("#kinds button", "bs => bs.map(b => b.dataset.kind)")
    assert kinds == ["cross"]
    assert page.inner_text("#source") == SENTENCE
    assert len(_links(page)) > 0 and errors == []


def test_side_by_side_draws_each_models_cross_attention_over_one_target(tmp_path, monkeypatch):
    import transduce.viz.views as views

    transformer = _translator("transformer", tmp_path)
    lstm = _translator("rnn", tmp_path)
    drawn = {}
    real_figure = views.side_by_side_figure

    def keep(panels, path, title):
        drawn["panels"] = panels
        return real_figure(panels, path, title)

    monkeypatch.setattr(views, "side_by_side_figure", keep)
    path = views.side_by_side([("T", transformer), ("L", lstm)], SENTENCE, tmp_path / "s.png")
    target = sentence_attention(transformer, SENTENCE).translation
    for (weights, queries, keys, name), translator, layer in zip(
        drawn["panels"], (transformer, lstm), (0, 0), strict=True
    ):  # both have 2 layers: the penultimate is layer 0
        own = sentence_attention(translator, SENTENCE, target, merge_words=True)
        assert (queries, keys) == own.labels["cross"] and name.endswith("heads averaged")
        assert torch.equal(weights, own.layers["cross"][layer].mean(dim=0))
    assert not torch.equal(drawn["panels"][0][0], drawn["panels"][1][0])
    image = matplotlib.image.imread(path)
    assert image.shape[1] > image.shape[0] and image[..., :3].std() > 0.05  # two panels, drawn


def test_the_attention_and_explain_verbs_hand_on_their_flags(tmp_path, monkeypatch, capsys):
    import transduce.viz.views as views
    from transduce.decoding.translate import Translator

    explain_module = importlib.import_module("transduce.viz.explain")  # the name is a function's
    seen = {}

    class Found:
        def text(self, decimals: int) -> str:
            return f"text to {decimals} decimals"

        def to_json(self) -> str:
            return "json"

    monkeypatch.setattr(
        Translator,
        "load",
        staticmethod(
            lambda model, device=None: seen.update(model=model, device=device) or "translator"
        ),
    )
    monkeypatch.setattr(views, "attention_views", lambda *given: seen.update(views=given) or [])
    monkeypatch.setattr(explain_module, "explain", lambda sentence, model, **settings: seen.update(
        explain=(sentence, model, settings)) or Found())  # fmt: skip
    main(["attention", "--model", "m.pt", "--sentence", "a b", "--target", "b a", "--out",
          str(tmp_path), "--layer", "1", "--merge-words", "--device", "cpu"])  # fmt: skip
    assert seen["views"] == ("translator", "a b", tmp_path, "b a", 1, True)
    assert (seen["model"], seen["device"]) == (Path("m.pt"), "cpu")
    main(["explain", "--sentence", "a b", "--seed", "3", "--d-model", "8", "--heads", "4",
          "--layer", "1", "--decimals", "2"])  # fmt: skip
    assert seen["explain"] == ("a b", None, {"seed": 3, "d_model": 8, "heads": 4, "layer": 1})
    main(["explain", "--sentence", "a b", "--model", "m.pt", "--json"])
    assert seen["explain"][1] == Path("m.pt")
    assert capsys.readouterr().out == "text to 2 decimals\njson\n"


def test_the_attention_verb_draws_another_model_beside(tmp_path, capsys):
    model = save_toy_model(tmp_path / "a")
    other = save_toy_model(tmp_path / "b")
    main(["attention", "--model", str(model), "--sentence", SENTENCE, "--out", str(tmp_path / "o"),
          "--beside", str(other)])  # fmt: skip
    printed = capsys.readouterr().out.split()
    assert printed[-1] == str(tmp_path / "o/cross_side_by_side.png") and Path(printed[-1]).exists()


def test_side_by_side_panels_draw_target_rows_and_source_columns(monkeypatch):
    drawn = []
    monkeypatch.setattr(figures_module, "_save", lambda figure, path: drawn.append(figure) or path)
    weights = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])  # (2 targets, 3 sources)
    queries, keys = ["t0", "t1"], ["s0", "s1", "s2"]
    other = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5]])
    panels = [(weights, queries, keys, "A"), (other, queries, keys, "B")]
    figures_module.side_by_side_figure(panels, Path("side.png"), "title")
    axes = drawn[0].axes
    for ax, expected in zip(axes[:2], (weights, other), strict=True):
        assert torch.equal(torch.tensor(ax.images[0].get_array()), expected)
        assert [t.get_text() for t in ax.get_xticklabels()] == keys  # columns: the source
        assert [t.get_text() for t in ax.get_yticklabels()] == queries  # rows: the target
