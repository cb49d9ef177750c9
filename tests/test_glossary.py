"""Glossaries (`decoding/glossary.py`, `translate --glossary`, the server's `glossary`): a line
that uses a source phrase gets its translation as a term, matched as whole words, case ignored,
the longer entry first; and `term_use` (`evaluate --terms`), the share of terms an output holds."""

from __future__ import annotations

import pytest

from transduce.cli import main
from transduce.decoding.glossary import Glossary

from .conftest import save_toy_model, toy_vocab, write_lines


def test_source_phrases_match_as_whole_words_whatever_their_case():
    glossary = Glossary([("dog", "Hund"), ("hot dog", "Hotdog"), ("Straße", "street"),
                         ("new", "neu"), ("new  york", "New York")])  # fmt: skip
    assert glossary.terms_of("The Dog and the dog bark") == ["Hund"]  # each once
    assert glossary.terms_of("a dogma, dogs, underdog") == []  # not inside words
    assert glossary.terms_of("a hot dog and a dog") == ["Hotdog", "Hund"]  # longest first
    assert glossary.terms_of("HOT DOG") == ["Hotdog"]
    assert glossary.terms_of("in der STRASSE") == ["street"]  # case folded as Unicode does
    assert Glossary([("café", "Kaffee")]).terms_of("un cafe\u0301 noir") == ["Kaffee"]  # NFD
    assert glossary.terms_of("to New\tYork, the dog's bone") == ["New York", "Hund"]  # not "neu"
    assert glossary.terms_of("a new dog") == ["neu", "Hund"]
    assert Glossary([]).terms_of("anything") == []
    assert glossary.terms(["the dog", "grass"], [["Gras"], ["Gras"]]) == [["Gras", "Hund"],
                                                                           ["Gras"]]  # fmt: skip


def test_source_phrases_in_a_script_without_spaces_and_in_tokenized_text(tmp_path):
    """A Japanese source phrase sits inside running text ("犬" in "私は犬が好き"), a Latin one
    beside it still ends its word; in pre-tokenized text every word stands between spaces ("犬"
    is not in "子犬"): `translate --glossary` and the server read which from the model's task."""
    from argparse import Namespace
    from types import SimpleNamespace

    from transduce.cli.guides import Guides
    from transduce.config import TaskConfig

    glossary = Glossary([("犬", "dog"), ("Pochi", "Pochi"), ("iPhone", "iPhone"), ("U.S.", "USA")])
    assert glossary.terms_of("私は犬が好き") == ["dog"]
    assert glossary.terms_of("新しいiPhoneを") == ["iPhone"]  # Japanese beside it: no word
    assert glossary.terms_of("the u.s.a. team") == []  # a word beside its final period
    assert glossary.terms_of("Pochikoと子犬") == ["dog"]
    lines = ["私 は 子犬 が 好き", "私 は 犬 が"]
    assert glossary.for_text(True).terms(lines) == [[], ["dog"]]
    assert glossary.for_text(False) is glossary and glossary.terms(lines) == [["dog"], ["dog"]]
    many = Glossary([(f"w{i} w", "x") for i in range(1000)] + [(f"犬{i}", "y") for i in range(9)])
    assert many._pattern.pattern.count("(?<!") == 1  # a check a place, not one a phrase
    path = write_lines(tmp_path / "glossary.tsv", ["犬\tdog"])
    assert Glossary.read(path, tokenized=True).terms(lines) == [[], ["dog"]]
    for task, terms in [(TaskConfig(tokenize="none", lowercase=True), [[], ["dog"]]),
                        (TaskConfig(), [["dog"], ["dog"]])]:  # fmt: skip
        guides = Guides(Namespace(prefix=None, terms=None, glossary=path, avoid=None))
        vocab = toy_vocab(tmp_path / "vocab")  # it can write "dog"
        guides.check(SimpleNamespace(vocab=vocab, task=SimpleNamespace(config=task)))
        assert guides.of_group(lines, 0)["terms"] == terms
    pytest.importorskip("fastapi", reason="the serve extra")
    from transduce.serve.routes import _terms_with_glossary
    from transduce.serve.schemas import TranslateRequest

    body = TranslateRequest(texts=lines, glossary={"犬": "dog"})
    assert _terms_with_glossary(body, TaskConfig(tokenize="none")) == [[], ["dog"]]
    assert _terms_with_glossary(body, TaskConfig()) == [["dog"], ["dog"]]


def test_a_glossary_file_and_its_mistakes_named(tmp_path):
    path = tmp_path / "glossary.tsv"
    path.write_text("# client X\ndog\tHund\r\n\ngreen grass\tGras\n", encoding="utf-8")
    assert Glossary.read(path).entries == {"dog": "Hund", "green grass": "Gras"}
    path.write_text("dog\tHund\ncat Katze\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 2: expected 'source<TAB>translation', got 1"):
        Glossary.read(path)
    with pytest.raises(ValueError, match="entry 2: a source phrase and its translation"):
        Glossary([("dog", "Hund"), ("cat", " ")])
    with pytest.raises(ValueError, match="entry 2: 'DOG' is translated both 'Hund' and 'Köter'"):
        Glossary([("dog", "Hund"), ("DOG", "Köter")])
    with pytest.raises(ValueError, match="2 term lists for 1 lines"):
        Glossary([("dog", "Hund")]).terms(["the dog"], [[], []])
    many = Glossary([(f"w{i}", f"t{i}") for i in range(20)])
    line = " ".join(f"w{i}" for i in reversed(range(20)))
    assert many.terms([line], [["mine"]], 4) == [["mine", "t19", "t18", "t17"]]  # used first


def test_the_command_line_applies_a_glossary_to_the_lines_that_use_it(tmp_path):
    model = save_toy_model(tmp_path)
    source = write_lines(tmp_path / "in.txt", ["the dog runs", "green grass", "the children"])
    glossary = write_lines(tmp_path / "glossary.tsv", ["Dog\toutside", "children\tgreen grass"])
    terms = write_lines(tmp_path / "terms.txt", ["", "outside", "playing"])
    out = tmp_path / "out.txt"
    base = ["translate", "--model", str(model), "--input", str(source), "--beam", "3",
            "--output", str(out)]  # fmt: skip
    main([*base])
    plain = out.read_text(encoding="utf-8").splitlines()
    main([*base, "--glossary", str(glossary)])
    first, second, third = out.read_text(encoding="utf-8").splitlines()
    assert "outside" in first.split() and second == plain[1] and "green grass" in third
    main([*base, "--glossary", str(glossary), "--terms", str(terms), "--buffer-size", "2"])
    first, second, third = out.read_text(encoding="utf-8").splitlines()
    assert "outside" in first.split() and "outside" in second.split()
    assert "green grass" in third and "playing" in third.split()
    with pytest.raises(SystemExit, match="--terms and --glossary need beam search"):
        main([*base[:-4], "--glossary", str(glossary), "--sampling"])
    write_lines(glossary, ["dog"])
    with pytest.raises(SystemExit, match="expected 'source<TAB>translation'"):
        main([*base, "--glossary", str(glossary)])
    # a translation no output can hold: named before any line is translated, none written
    write_lines(glossary, ["dog\tgrass", "cat\tschnee☃"])
    out.unlink()
    with pytest.raises(SystemExit, match=r"1 glossary translation.*'schnee☃' \('☃'\)"):
        main([*base, "--glossary", str(glossary)])
    assert not out.exists()


def test_a_line_using_more_entries_than_terms_allows_keeps_the_first(tmp_path, caplog):
    """A line that uses 18 entries: translated with the first MAX_TERMS (16) of them, said,
    instead of the run failing at that line."""
    from transduce.decoding.terms import MAX_TERMS

    model = save_toy_model(tmp_path)
    words = ["the", "dog", "runs", "across", "green", "grass"]
    translations = [f"{a} {b}" for a in words for b in words if a != b][:18]
    source = write_lines(tmp_path / "in.txt", [" ".join(f"s{i}" for i in range(18)), "grass"])
    glossary = write_lines(tmp_path / "glossary.tsv",
                           [f"s{i}\t{t}" for i, t in enumerate(translations)])  # fmt: skip
    out = tmp_path / "out.txt"
    with caplog.at_level("WARNING", logger="transduce"):
        main(["translate", "--model", str(model), "--input", str(source), "--glossary",
              str(glossary), "--output", str(out), "--beam", "1"])  # fmt: skip
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2
    assert f"line 1: 18 terms with the glossary's, the first {MAX_TERMS} kept" in caplog.text


def test_term_use_counts_terms_held_as_whole_words_and_evaluate_reports_it(tmp_path, capsys):
    """Exact-match term use: "Hund" is held by "Der Hund." but not by "Hunde", a phrase across
    any spaces, case kept unless lowercased, composed (NFC) either way; `evaluate --terms`."""
    from transduce import term_use

    hypotheses = ["Der Hund. Ein  roter Ball", "Hunde laufen", "der hund", "un cafe\u0301"]
    terms = [["Hund", "roter Ball"], ["Hund"], ["Hund", ""], ["café"]]
    assert term_use(hypotheses, terms).score == pytest.approx(100 * 3 / 5)
    assert term_use(hypotheses, terms, lowercase=True).score == pytest.approx(100 * 4 / 5)
    with pytest.raises(ValueError, match="4 hypotheses but 1 term lines"):
        term_use(hypotheses, terms[:1])
    with pytest.raises(ValueError, match="no terms to count"):
        term_use(["a"], [[""]])
    hyp = write_lines(tmp_path / "hyp.txt", hypotheses)
    ref = write_lines(tmp_path / "ref.txt", ["Der Hund. Ein roter Ball", "Hunde", "der hund", "x"])
    path = write_lines(tmp_path / "terms.txt", ["\t".join(t) for t in terms])
    main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--terms", str(path)])
    assert "term use = 60.00 (3 of 5 terms held as whole words)" in capsys.readouterr().out
    write_lines(path, ["Hund"])
    with pytest.raises(SystemExit, match=r"has 1 lines, --hyp .* 4"):
        main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--terms", str(path)])
    with pytest.raises(SystemExit, match="--terms is for translations' BLEU"):
        main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--terms", str(path), "--task",
              "parse"])  # fmt: skip


def test_term_use_in_scripts_without_spaces_and_in_tokenized_text(tmp_path, capsys):
    """Running Japanese holds "犬" inside "私は犬が" (no word ends to meet), a Latin term beside
    it ends its word still ("Pochi" not in "Pochiko"); in tokenized text every word stands
    between spaces, so "犬" is held by "は 犬 が" but not by "子犬", and the CLI's
    --lowercase-tokenized counts so."""
    from transduce import term_use

    running = ["私は犬が好きです", "Pochikoと遊ぶ", "子犬がいる"]
    assert term_use(running, [["犬"], ["Pochi"], ["犬"]]).score == pytest.approx(100 * 2 / 3)
    mixed = ["新しいiPhone 15を", "犬が3匹いる", "人々とｶﾒﾗ", "AI犬", "ASP.NET", "C++11", "hotdogs"]
    terms = [["iPhone 15"], ["3匹"], ["人々", "ｶﾒﾗ"], ["犬"], [".NET"], ["C++"], [" dog "]]
    assert term_use(mixed, terms).score == pytest.approx(100 * 5 / 8)  # the last three not
    tokenized = ["私 は 犬 が 好き です", "私 は 子犬 が 好き"]
    assert term_use(tokenized, [["犬"], ["犬"]], tokenized=True).score == 50
    assert term_use(tokenized, [["犬"], ["犬"]]).score == 100
    assert "|tokenized|" in term_use(tokenized, [["犬"], []], tokenized=True).signature
    hyp = write_lines(tmp_path / "hyp.txt", tokenized)
    path = write_lines(tmp_path / "terms.txt", ["犬", "犬"])
    main(["evaluate", "--hyp", str(hyp), "--ref", str(hyp), "--terms", str(path),
          "--lowercase-tokenized"])  # fmt: skip
    assert "term use = 50.00 (1 of 2 terms" in capsys.readouterr().out


def test_a_translator_gives_a_glossary_matched_as_its_model_writes_text(tmp_path):
    """From Python, as the command line: a model of running text matches "犬" inside "子犬が";
    one of pre-tokenized text (every word between spaces) only as a word of its own; the
    entries given or read from a file."""
    from transduce.config import TaskConfig
    from transduce.decoding.translate import Translator

    from .conftest import toy_translator

    running = toy_translator(tmp_path)
    tokenized = Translator(running.model, running.vocab, running.decode, running.device,
                           TaskConfig(tokenize="none", lowercase=True))  # fmt: skip
    entries = [("犬", "dog")]
    assert running.glossary(entries).terms_of("子犬が走る") == ["dog"]
    assert tokenized.glossary(entries).terms_of("子犬 が 走る") == []
    assert tokenized.glossary(entries).terms_of("子 犬 が 走る") == ["dog"]
    path = write_lines(tmp_path / "glossary.tsv", ["犬\tdog"])
    assert tokenized.glossary(path).tokenized and not running.glossary(str(path)).tokenized
