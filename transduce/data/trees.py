"""Phrase-structure trees for English constituency parsing (s6.3): read, clean, write.

Owns the `Tree` value, the reader for Penn Treebank bracketed `.mrg` files (several trees
a file, each usually wrapped in an unlabelled `( ... )` or `(TOP ...)`/`(ROOT ...)`), the
one-line bracketed writer, and the cleaning the parsing task trains and scores on (s6.3
follows Vinyals et al. 2015, "Grammar as a Foreign Language"): empty elements (`-NONE-`)
and the nodes they leave empty are removed, function tags and indices are stripped
(`NP-SBJ-1` -> `NP`) and the wrapper is dropped. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

EMPTY_TAG = "-NONE-"
WRAPPER_LABELS = frozenset({"", "TOP", "ROOT"})

# Labels wholly inside dashes (-LRB-, -RRB-, -NONE-) are names, not function tags.
_DASHED_NAME = re.compile(r"^-[^-=]+-$")
_TOKEN = re.compile(r"\(|\)|[^\s()]+")


class TreeFormatError(ValueError):
    """A bracketed tree that cannot be read; the message names the source and line."""


@dataclass(frozen=True)
class Tree:
    """A labelled node; its children are subtrees or, for a preterminal, one word.

    A preterminal is a node whose only child is a word: its label is the POS tag.
    """

    label: str
    children: tuple[Tree | str, ...]

    def is_preterminal(self) -> bool:
        return len(self.children) == 1 and isinstance(self.children[0], str)

    def leaves(self) -> list[str]:
        """The words, left to right."""
        return [word for word, _ in self.pos()]

    def pos(self) -> list[tuple[str, str]]:
        """(word, tag) pairs, left to right."""
        return [(node.children[0], node.label) for node in self.preterminals()]

    def preterminals(self) -> Iterator[Tree]:
        stack: list[Tree] = [self]
        while stack:
            node = stack.pop()
            if node.is_preterminal():
                yield node
            else:
                stack.extend(reversed([c for c in node.children if isinstance(c, Tree)]))

    def __str__(self) -> str:
        return to_string(self)


def to_string(tree: Tree) -> str:
    """The tree as one bracketed line: `(S (NP (DT the) (NN cat)) (VP (VBD sat)))`."""
    if tree.is_preterminal():
        return f"({tree.label} {tree.children[0]})"
    inside = " ".join(to_string(c) for c in tree.children if isinstance(c, Tree))
    return f"({tree.label} {inside})"  # an unlabelled wrapper: `( (S ...))`


def parse_trees(text: str, source: str = "<string>") -> list[Tree]:
    """Every bracketed tree in `text`, in order, exactly as written (no cleaning).

    Raises:
        TreeFormatError: unbalanced brackets, a word outside a preterminal, a node with
            no children; the message names `source` and the line.
    """
    tokens = _tokenize(text)
    trees: list[Tree] = []
    at = 0
    while at < len(tokens):
        token, line = tokens[at]
        if token != "(":
            raise TreeFormatError(f"{source}:{line}: expected '(' but found {token!r}")
        tree, at = _parse_node(tokens, at, source)
        trees.append(tree)
    return trees


def parse_tree(text: str, source: str = "<string>") -> Tree:
    """Exactly one bracketed tree."""
    trees = parse_trees(text, source)
    if len(trees) != 1:
        raise TreeFormatError(f"{source}:1: expected one tree, found {len(trees)}")
    return trees[0]


def read_mrg(path: str | Path) -> list[Tree]:
    """The raw trees of one treebank file (UTF-8; the WSJ files are ASCII)."""
    path = Path(path)
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise TreeFormatError(f"{path}:{line}: invalid UTF-8 ({err.reason})") from None
    return parse_trees(text, str(path))


def _tokenize(text: str) -> list[tuple[str, int]]:
    tokens = []
    line = 1
    last = 0
    for match in _TOKEN.finditer(text):
        line += text.count("\n", last, match.start())
        last = match.start()
        tokens.append((match.group(), line))
    return tokens


def _parse_node(tokens: list[tuple[str, int]], at: int, source: str) -> tuple[Tree, int]:
    """Read the node whose '(' is tokens[at]; return it and the index after its ')'."""
    _, open_line = tokens[at]
    at += 1
    label = ""
    if at < len(tokens) and tokens[at][0] not in "()":
        label, at = tokens[at][0], at + 1
    children: list[Tree | str] = []
    while at < len(tokens) and tokens[at][0] != ")":
        token = tokens[at][0]
        if token == "(":
            child, at = _parse_node(tokens, at, source)
            children.append(child)
        else:
            children.append(token)
            at += 1
    if at == len(tokens):
        raise TreeFormatError(f"{source}:{open_line}: '(' is never closed")
    if not children:
        raise TreeFormatError(f"{source}:{open_line}: node ({label}) has no children")
    words = [c for c in children if isinstance(c, str)]
    if words and len(children) > 1:
        raise TreeFormatError(
            f"{source}:{open_line}: word {words[0]!r} must be the only child of its node"
        )
    return Tree(label, tuple(children)), at + 1


def strip_function_tags(label: str) -> str:
    """The category without function tags or indices: `NP-SBJ-1` -> `NP`, `PP-LOC=2` -> `PP`.

    Labels wholly inside dashes (`-LRB-`, `-NONE-`) are kept as they are.
    """
    if _DASHED_NAME.match(label):
        return label
    for at, char in enumerate(label):
        # at > 0: a label that starts with '-' or '=' has no category to keep
        if at > 0 and char in "-=":
            return label[:at]
    return label


def remove_empty(tree: Tree) -> Tree | None:
    """The tree without -NONE- preterminals and the nodes they leave empty; None if none left."""
    if tree.is_preterminal():
        return None if tree.label == EMPTY_TAG else tree
    kept = [k for c in tree.children if isinstance(c, Tree) and (k := remove_empty(c)) is not None]
    return Tree(tree.label, tuple(kept)) if kept else None


def relabel(tree: Tree) -> Tree:
    """The tree with every label passed through `strip_function_tags`."""
    if tree.is_preterminal():
        return Tree(strip_function_tags(tree.label), tree.children)
    children = tuple(relabel(c) for c in tree.children if isinstance(c, Tree))
    return Tree(strip_function_tags(tree.label), children)


def unwrap(tree: Tree) -> Tree:
    """The tree below an unlabelled, TOP or ROOT wrapper with a single child.

    A wrapper around several children is kept, relabelled TOP, so no words are lost.
    """
    if tree.label not in WRAPPER_LABELS or tree.is_preterminal():
        return tree
    if len(tree.children) == 1:
        return unwrap(tree.children[0])  # type: ignore[arg-type]
    return Tree("TOP", tree.children)


def clean(tree: Tree) -> Tree | None:
    """A raw treebank tree as the task uses it: no wrapper, no empty elements, no function tags.

    Returns None for a tree made only of empty elements.
    """
    kept = remove_empty(tree)
    return None if kept is None else relabel(unwrap(kept))
