"""Translation quality (s6.1): sacreBLEU with its signature, chrF, and tokenized BLEU.

`lowercase_tokenized=True` scores lowercased text split on whitespace, as multi-bleu.perl does
on pre-tokenized text: the number published Multi30k baselines report (use it on the `tok`
variant's output). The default is sacreBLEU's own: cased, detokenized, 13a tokenization.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from dataclasses import dataclass

import sacrebleu

from ..lines import sentence_list
from ..writing import as_words, unspaced

logger = logging.getLogger(__name__)

# sacreBLEU's own test for text tokenized by mistake: this many lines ending in " ."
TOKENIZED_PERIODS = 100


@dataclass(frozen=True)
class Score:
    name: str
    score: float
    signature: str
    detail: str  # sacreBLEU's line, e.g. "BLEU = 41.20 72.1/48.0/... (BP = ...)"

    def __str__(self) -> str:
        return f"{self.detail}\n  signature: {self.signature}"


def _checked(hypotheses: list[str], references: list[str]) -> tuple[list[str], list[str]]:
    """Both as lists of str of one length; two strings would be scored character by character."""
    hypotheses = sentence_list(hypotheses, "hypotheses")
    references = sentence_list(references, "references")
    if len(hypotheses) != len(references):
        raise ValueError(
            f"{len(hypotheses)} hypotheses but {len(references)} references: one line each"
        )
    if not hypotheses:
        raise ValueError("no hypotheses to score: a corpus score needs at least one line")
    return hypotheses, references


def bleu(
    hypotheses: list[str],
    references: list[str],
    lowercase_tokenized: bool = False,
    *,
    tokenize: str = "13a",
    lowercase: bool = False,
    tokenized_text: bool = False,
) -> Score:
    """Corpus BLEU of one reference per hypothesis, with sacreBLEU's `tokenize` and `lowercase`.

    `lowercase_tokenized=True` is `tokenize="none", lowercase=True`. `tokenized_text`: the text
    is tokenized on purpose (a corpus's `tok` variant), so the hint logged for text that looks
    tokenized by mistake (sacreBLEU's test, our words) is left out.
    """
    hypotheses, references = _checked(hypotheses, references)
    if lowercase_tokenized:
        tokenize, lowercase = "none", True
    if not tokenized_text and tokenize != "none":
        _hint_if_tokenized(hypotheses)
    if tokenize in ("13a", "intl"):
        _hint_if_unspaced(references)
    # force: sacreBLEU's own warning names a parameter of its API, not what to do here
    metric = sacrebleu.BLEU(tokenize=tokenize, lowercase=lowercase, force=True)
    result = metric.corpus_score(hypotheses, [references])
    return Score("BLEU", result.score, str(metric.get_signature()), str(result))


def _hint_if_tokenized(hypotheses: list[str]) -> None:
    """sacreBLEU's test for text tokenized by mistake, with what to do here instead."""
    periods = sum(line.endswith(" .") for line in hypotheses)
    if periods >= TOKENIZED_PERIODS:
        logger.warning(
            "%d lines end in a tokenized period (' .'): sacreBLEU's score is meant for "
            "detokenized text. For text tokenized on purpose (a corpus's `tok` variant) score it "
            "as tokens: `transduce evaluate --lowercase-tokenized`, the number published "
            "Multi30k results report.",
            periods,
        )


def _hint_if_unspaced(references: list[str]) -> None:
    """13a (and intl) split words at spaces: a sentence of Japanese, Chinese or Thai is one
    word to them, and any output not exact scores 0. Said when most of the references' word
    characters are of such scripts."""
    sample = "".join(references[:200])
    letters = [c for c in sample if c.isalnum()]
    if letters and sum(map(unspaced, letters)) > len(letters) / 2:
        logger.warning(
            "the references are mostly in a script written without spaces (Japanese, Chinese, "
            "Thai): BLEU's 13a tokenization reads each sentence as one word. Score on "
            "characters: `transduce evaluate --tokenize char` (zh for Chinese); `prepare` "
            "chooses so by --tgt for raw text."
        )


def chrf(hypotheses: list[str], references: list[str]) -> Score:
    hypotheses, references = _checked(hypotheses, references)
    metric = sacrebleu.CHRF()
    result = metric.corpus_score(hypotheses, [references])
    return Score("chrF", result.score, str(metric.get_signature()), str(result))


def term_use(
    hypotheses: list[str], terms: list[list[str]], lowercase: bool = False, tokenized: bool = False
) -> Score:
    """The share of the given terms the hypotheses hold as whole words, each line its own
    (exact-match term accuracy, as the WMT 2021 terminology task reports it): what
    `translate --terms` and `--glossary` promise, measured on the text a reader sees (a term
    inside a longer word, "Hund" in "Hunde", is not held; in running text of a script without
    spaces, "犬" in "私は犬が", it is; in `tokenized` text every word stands between spaces, in
    any script). Text composed (NFC) and, with `lowercase`, case-folded."""
    hypotheses = sentence_list(hypotheses, "hypotheses")
    if len(terms) != len(hypotheses):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(terms)} term lines: one each")
    held = asked = 0
    for hypothesis, line in zip(hypotheses, terms, strict=True):
        text = _as_compared(hypothesis, lowercase)
        for term in (t for t in line if t.strip()):
            pattern = as_words(_as_compared(term, lowercase), tokenized)
            held += re.search(pattern, text) is not None
            asked += 1
    if not asked:
        raise ValueError("no terms to count: every term line is empty")
    share = 100 * held / asked
    case = "lc" if lowercase else "mixed"
    detail = f"term use = {share:.2f} ({held} of {asked} terms held as whole words)"
    words = "whole-words|tokenized" if tokenized else "whole-words"
    return Score("term use", share, f"terms:{asked}|{words}|case:{case}|nfc", detail)


def _as_compared(text: str, lowercase: bool) -> str:
    text = unicodedata.normalize("NFC", text)
    return text.casefold() if lowercase else text
