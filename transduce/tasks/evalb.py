"""Bracket scoring for constituency parsing (s6.3, Table 4's "WSJ 23 F1"), exactly as EVALB.

EVALB (Sekine and Collins 1997; the 2006 release) run with COLLINS.prm is the standard
scorer the paper's F1 comes from. This module re-implements it, rule for rule, on the
same one-line bracketed input, so its numbers and its report agree with the C program:

- a line is read as EVALB reads it: `(LABEL word)` is a preterminal, any other `(` opens a
  bracket. A preterminal whose tag is a DELETE_LABEL (COLLINS: `TOP -NONE- , : `` '' .`) is
  dropped with its word; a bracket left spanning no word is dropped; a bracket whose label,
  cut at its first `-` or `=`, is a DELETE_LABEL (TOP) is dropped. Unary brackets and the
  whole-sentence bracket are counted like any other; an unlabelled wrapper `( ...)` is a
  bracket with the empty label and counts too, as it does in EVALB.
- labelled brackets match on span and label (ADVP = PRT: EQ_LABEL); duplicates match as a
  multiset, greedily in order.
- a sentence whose test line has no words left is a skip sentence (status 2); one whose
  word counts or words differ, or whose line is unbalanced, is an error sentence (status
  1). Neither enters the totals, but both count in "Number of sentence".
- the length used for the len<=40 block counts the gold words, punctuation included,
  except DELETE_LABEL_FOR_LENGTH tags (COLLINS: -NONE-).
- crossing counts test brackets that cross some gold bracket; tagging accuracy compares
  raw tags of the words left after deletion.

`evalb_files` reads lines as EVALB's fgets does (a line past 4,999 bytes is split). Not
emulated: EVALB's overflow past 200 words or brackets a sentence, its halt after MAX_ERROR
errors, and its endless error loop on input it cannot read (a word outside a preterminal, a
stray `)`), which raises `EvalbInputError` here. `gold_tags=True` (not an EVALB option)
first copies the gold POS tags into each test tree of the same length, for `XX` outputs.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..data.linearize import substitute_tags
from ..data.trees import EMPTY_TAG, Tree, parse_tree, to_string

logger = logging.getLogger(__name__)

_SPACE = frozenset(" \t\n\v\f\r")  # C isspace in the C locale
_TERMINATOR = _SPACE | {"(", ")"}
OK, ERROR, SKIP = 0, 1, 2


class EvalbInputError(ValueError):
    """A line EVALB cannot read (it loops on the error until it gives up)."""


@dataclass(frozen=True)
class EvalbParams:
    """The settings of an EVALB .prm file; the defaults are COLLINS.prm."""

    labeled: bool = True
    delete_labels: tuple[str, ...] = ("TOP", EMPTY_TAG, ",", ":", "``", "''", ".")
    delete_labels_for_length: tuple[str, ...] = (EMPTY_TAG,)
    equal_labels: tuple[tuple[str, str], ...] = (("ADVP", "PRT"),)
    equal_words: tuple[tuple[str, str], ...] = ()
    cutoff_len: int = 40


COLLINS = EvalbParams()


@dataclass(frozen=True)
class SentenceScore:
    """One line of EVALB's per-sentence table."""

    id: int
    length: int  # gold words except DELETE_LABEL_FOR_LENGTH tags: decides len<=40
    status: int  # 0 ok, 1 error, 2 skip
    matched: int
    gold_brackets: int
    test_brackets: int
    crossing: int
    words: int
    correct_tags: int

    @property
    def recall(self) -> float:
        return percent(self.matched, self.gold_brackets)

    @property
    def precision(self) -> float:
        return percent(self.matched, self.test_brackets)

    @property
    def tag_accuracy(self) -> float:
        return percent(self.correct_tags, self.words)


def percent(part: int, whole: int, scale: float = 100.0) -> float:
    # EVALB prints 0.00 for a rate over nothing
    return scale * part / whole if whole > 0 else 0.0


@dataclass
class Totals:
    """One block of EVALB's summary ("All" or "len<=40"); its rates are percentages."""

    sentences: int = 0
    error_sentences: int = 0
    skip_sentences: int = 0
    gold_brackets: int = 0
    test_brackets: int = 0
    matched: int = 0
    complete: int = 0
    words: int = 0
    crossing: int = 0
    no_crossing: int = 0
    two_or_less_crossing: int = 0
    correct_tags: int = 0

    def add(self, s: SentenceScore) -> None:
        self.sentences += 1
        if s.status != OK:
            self.error_sentences += s.status == ERROR
            self.skip_sentences += s.status == SKIP
            return
        self.gold_brackets += s.gold_brackets
        self.test_brackets += s.test_brackets
        self.matched += s.matched
        self.complete += s.gold_brackets == s.test_brackets == s.matched
        self.words += s.words
        self.crossing += s.crossing
        self.no_crossing += s.crossing == 0
        self.two_or_less_crossing += s.crossing <= 2
        self.correct_tags += s.correct_tags

    @property
    def valid_sentences(self) -> int:
        return self.sentences - self.error_sentences - self.skip_sentences

    @property
    def recall(self) -> float:
        return percent(self.matched, self.gold_brackets)

    @property
    def precision(self) -> float:
        return percent(self.matched, self.test_brackets)

    @property
    def fmeasure(self) -> float:
        """NaN when recall and precision are both 0, as EVALB's 2pr/(p+r) gives."""
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else math.nan

    @property
    def complete_match(self) -> float:
        return percent(self.complete, self.valid_sentences)

    @property
    def average_crossing(self) -> float:
        return percent(self.crossing, self.valid_sentences, scale=1.0)

    @property
    def tag_accuracy(self) -> float:
        return percent(self.correct_tags, self.words)


@dataclass
class EvalbResult:
    sentences: list[SentenceScore] = field(default_factory=list)
    all: Totals = field(default_factory=Totals)
    short: Totals = field(default_factory=Totals)  # sentences of length <= cutoff_len
    cutoff_len: int = 40


@dataclass
class _Line:
    """What EVALB's read_line gathers from one line."""

    words: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    spans: list[list] = field(default_factory=list)  # [start, end, label]; end -1: unclosed
    length: int = 0
    error: bool = False


def _read_line(line: str, params: EvalbParams) -> _Line:
    out = _Line()
    stack: list[int] = []
    at, n = 0, len(line)
    while at < n:
        char = line[at]
        if char in _SPACE:
            at += 1
        elif char == "(":
            at = _read_open(line, at, out, stack, params)
        elif char == ")":
            if not stack:
                raise EvalbInputError(f"unbalanced ')' at column {at + 1}: {line.strip()!r}")
            out.spans[stack.pop()][1] = len(out.words)
            at += 1
        else:
            raise EvalbInputError(f"word outside a preterminal at column {at + 1}: {line!r}")
    out.error |= bool(stack)  # "Bracketing is unbalanced (too many open bracket)"
    return out


def _read_open(line: str, at: int, out: _Line, stack: list[int], params: EvalbParams) -> int:
    """Read after the '(' at `at`: a preterminal or a bracket's label; return the next index."""
    end = _scan(line, at + 1, _TERMINATOR)
    label = line[at + 1 : end]
    if end < len(line) and line[end] in _SPACE:
        start = _scan(line, end, _SPACE, skip=True)
        stop = _scan(line, start, _TERMINATOR)
        closes = stop < len(line) and line[stop] == ")"
        if closes:
            out.length += label not in params.delete_labels_for_length
            if label not in params.delete_labels:
                out.words.append(line[start:stop])
                out.tags.append(label)
            return stop + 1
        # Else a word that is not alone in its bracket ("More than two elements in a bracket",
        # says EVALB) is read next as a word outside a preterminal, which raises.
    stack.append(len(out.spans))
    out.spans.append([len(out.words), -1, label])
    return end


def _scan(line: str, at: int, stop: frozenset[str], skip: bool = False) -> int:
    """The first index from `at` whose character is in `stop` (skip=True: is not in it)."""
    while at < len(line) and (line[at] in stop) == skip:
        at += 1
    return at


def _same(a: str, b: str, pairs: tuple[tuple[str, str], ...]) -> bool:
    return a == b or (a, b) in pairs or (b, a) in pairs


def _cut_label(label: str) -> str:
    # EVALB's modify_label: cut at the first '-' or '=' anywhere, even at position 0
    for at, char in enumerate(label):
        if char in "-=":
            return label[:at]
    return label


def _kept_brackets(line: _Line, params: EvalbParams) -> list[tuple[int, int, str]]:
    kept = []
    for start, end, label in line.spans:
        if start == end:
            continue  # spans no word: an empty element, or only deleted punctuation
        label = _cut_label(label)
        if not any(_same(label, d, params.equal_labels) for d in params.delete_labels):
            kept.append((start, end, label))
    return kept


def score_sentence(
    gold: Tree | str, test: Tree | str | None, params: EvalbParams = COLLINS, id: int = 1
) -> SentenceScore:
    """EVALB's verdict on one sentence. A Tree is scored as its one-line string."""
    g = _read_side(gold, "gold", id, params)
    t = _read_side(test, "test", id, params)
    fail = SentenceScore(id, g.length, ERROR, 0, 0, 0, 0, 0, 0)
    if not t.words:
        return replace(fail, status=SKIP)
    if len(g.words) != len(t.words):
        return fail  # "Length unmatch": no tree can be scored against the other
    if any(not _same(a, b, params.equal_words) for a, b in zip(g.words, t.words, strict=True)):
        return fail  # "Words unmatch"
    gold_brackets, test_brackets = _kept_brackets(g, params), _kept_brackets(t, params)
    status = ERROR if g.error or t.error else OK
    correct = sum(_same(a, b, params.equal_labels) for a, b in zip(g.tags, t.tags, strict=True))
    return SentenceScore(
        id=id,
        length=g.length,
        status=status,
        matched=_match(gold_brackets, test_brackets, params),
        gold_brackets=len(gold_brackets),
        test_brackets=len(test_brackets),
        crossing=_crossing(gold_brackets, test_brackets),
        words=len(g.words),
        correct_tags=correct,
    )


def _read_side(tree: Tree | str | None, side: str, id: int, params: EvalbParams):
    try:
        return _read_line(_as_line(tree), params)
    except EvalbInputError as error:
        raise EvalbInputError(f"{side} tree {id}: {error}") from error


def _match(gold: list, test: list, params: EvalbParams) -> int:
    """Greedy one-to-one matching in line order, as EVALB does: a multiset intersection."""
    free = [True] * len(test)
    matched = 0
    for g_start, g_end, g_label in gold:
        for j, (t_start, t_end, t_label) in enumerate(test):
            same_span = free[j] and (g_start, g_end) == (t_start, t_end)
            if same_span and (not params.labeled or _same(g_label, t_label, params.equal_labels)):
                free[j] = False
                matched += 1
                break
    return matched


def _crossing(gold: list, test: list) -> int:
    """Test brackets that cross at least one gold bracket."""
    return sum(
        any(gs < ts < ge < te or ts < gs < te < ge for gs, ge, _ in gold) for ts, te, _ in test
    )


def _as_line(tree: Tree | str | None) -> str:
    if tree is None:
        return ""
    return tree if isinstance(tree, str) else to_string(tree)


def evalb(
    gold: Sequence[Tree | str],
    test: Sequence[Tree | str | None],
    params: EvalbParams = COLLINS,
    gold_tags: bool = False,
) -> EvalbResult:
    """Score `test` against `gold`, sentence by sentence and in total, as EVALB does.

    Args:
        gold, test: trees or one-line bracketed strings; None (or "") is a parse failure,
            which EVALB counts as a skip sentence.
        gold_tags: first give each test tree the gold POS tags (for `XX` placeholders).

    Raises:
        ValueError: the two sequences differ in length.
    """
    if len(gold) != len(test):
        raise ValueError(f"{len(gold)} gold trees but {len(test)} test trees")
    result = EvalbResult(cutoff_len=params.cutoff_len)
    for number, (g, t) in enumerate(zip(gold, test, strict=True), start=1):
        if gold_tags and t:
            g_tree = parse_tree(g, f"gold tree {number}") if isinstance(g, str) else g
            t_tree = parse_tree(t, f"test tree {number}") if isinstance(t, str) else t
            t = substitute_tags(t_tree, g_tree)
        _add(result, score_sentence(g, t, params, number), params)
    return result


def evalb_files(
    gold_path: str | Path, test_path: str | Path, params: EvalbParams = COLLINS
) -> EvalbResult:
    """Score two files of one-line trees, as `evalb -p COLLINS.prm gold test` does."""
    gold, test = _fgets_lines(gold_path), _fgets_lines(test_path)
    if len(gold) != len(test):
        # EVALB scores the common prefix and reports "Number of lines unmatch"
        logger.warning("%s: %d lines, %s: %d lines", gold_path, len(gold), test_path, len(test))
    result = EvalbResult(cutoff_len=params.cutoff_len)
    for number, (g, t) in enumerate(zip(gold, test, strict=False), start=1):
        _add(result, score_sentence(g, t, params, number), params)
    return result


def _fgets_lines(path: str | Path) -> list[str]:
    """The lines as EVALB's fgets(buff, 5000) returns them: at most 4,999 bytes each."""
    text = Path(path).read_bytes().decode("latin-1")  # one char per byte, as C sees it
    lines = re.findall(r"[^\n]*\n|[^\n]+$", text)
    return [line[at : at + 4999] for line in lines for at in range(0, len(line), 4999)]


def _add(result: EvalbResult, score: SentenceScore, params: EvalbParams) -> None:
    result.sentences.append(score)
    result.all.add(score)
    if score.length <= params.cutoff_len:
        result.short.add(score)
