"""Trees as token sequences and back, after Vinyals et al. 2015 (the parsing task of s6.3).

"Grammar as a Foreign Language" writes a tree depth first: an opening bracket carries its
label (`(NP`), a closing bracket carries it again (`)NP`), and each word is replaced by its
POS tag or by the single placeholder `XX` (their choice; `tags=False` here). The source
side is the sentence's words. A decoder may emit a sequence that is no tree, so `restore`
repairs it into one whose leaves are exactly the input words, and says whether it had to;
`substitute_tags` gives such a tree the gold POS tags before scoring, as is usual for `XX`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .trees import EMPTY_TAG, Tree

PLACEHOLDER = "XX"
ROOT_LABEL = "S"  # the label given to a root that `restore` has to invent


def linearize(tree: Tree, tags: bool = True) -> list[str]:
    """The target tokens of `tree`: `(S (NP DT NN )NP (VP VBD )VP . )S`.

    Args:
        tags: keep each POS tag; False writes the placeholder `XX` for every word.
    """
    if tree.is_preterminal():
        return [tree.label if tags else PLACEHOLDER]
    tokens = [f"({tree.label}"]
    for child in tree.children:
        tokens.extend(linearize(child, tags))  # type: ignore[arg-type]
    tokens.append(f"){tree.label}")
    return tokens


@dataclass
class _Open:
    label: str
    children: list[Tree] = field(default_factory=list)


def restore(tokens: list[str], words: list[str], tags: bool = True) -> tuple[Tree, bool]:
    """The tree a decoded sequence stands for, with `words` as its leaves, and whether it
    had to be repaired.

    Repairs: a closer with nothing open is dropped; a closer closes the innermost open
    bracket even when its label differs; brackets still open at the end are closed;
    bracket nodes left without children are dropped; preterminals beyond the words are
    dropped and missing ones are appended as `(XX word)` to the root; several top-level
    nodes (or none, or a lone preterminal) get a root labelled `S`.

    Args:
        tokens: the decoded target, e.g. `["(S", "(NP", "NN", ")NP", ")S"]`.
        words: the source sentence; the result's leaves are exactly these.
        tags: the tokens carry POS tags; False labels every preterminal `XX`.

    Raises:
        ValueError: `words` is empty (no tree has no leaves).
    """
    if not words:
        raise ValueError("restore needs at least one word")
    repaired = False
    top = _Open(ROOT_LABEL)
    stack = [top]
    used = 0
    for token in tokens:
        if token.startswith("("):
            stack.append(_Open(token[1:]))
        elif token.startswith(")"):
            if len(stack) == 1 or token[1:] not in ("", stack[-1].label):
                repaired = True
            if len(stack) > 1:
                repaired |= _close(stack)
        elif used < len(words):
            stack[-1].children.append(Tree(token if tags else PLACEHOLDER, (words[used],)))
            used += 1
        else:
            repaired = True  # more preterminals than words
    while len(stack) > 1:
        repaired = True
        _close(stack)
    roots = top.children
    missing = [Tree(PLACEHOLDER, (word,)) for word in words[used:]]
    if len(roots) == 1 and not roots[0].is_preterminal():
        return Tree(roots[0].label, roots[0].children + tuple(missing)), repaired or bool(missing)
    return Tree(ROOT_LABEL, tuple(roots + missing)), True


def _close(stack: list[_Open]) -> bool:
    """Pop the innermost open bracket into its parent; True if it was empty and so dropped."""
    node = stack.pop()
    if not node.children:
        return True
    stack[-1].children.append(Tree(node.label, tuple(node.children)))
    return False


def substitute_tags(test: Tree, gold: Tree) -> Tree:
    """`test` with the gold POS tags, when both have as many words (-NONE- aside); else `test`.

    For a restored `XX` tree: EVALB then deletes the same punctuation words on both sides.
    """
    tags = [tag for _, tag in gold.pos() if tag != EMPTY_TAG]
    if len(tags) != len(test.leaves()):
        return test
    queue = iter(tags)

    def retag(node: Tree) -> Tree:
        if node.is_preterminal():
            return Tree(next(queue), node.children)
        return Tree(node.label, tuple(retag(c) for c in node.children))  # type: ignore[arg-type]

    return retag(test)
