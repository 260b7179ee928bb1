"""Excerpts: a sentence of the user's without its formula clauses, for a ledger short of room.

A formula clause is a lead-in ("For the record:", "Please remember that") or a tail (", and
that is final") whose words the user repeats across many of the forgotten sentences and that
carries no value, limit or obligation of its own. Cutting it keeps the clause that carries
the value verbatim, with "…" where words were cut, so that more statements fit the same room.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from strategies.values import CONCRETE, MODAL, stated, words_of

ELLIPSIS = "…"
# Where a lead-in may end (a comma, a colon, a dash, or "that" opening a clause) and where a
# tail may begin.
LEAD_END = re.compile(r"[,:;]\s+|\s+[-–—]\s+|\s+that\s+", re.IGNORECASE)
TAIL_START = re.compile(r"[,;]\s+|\s+[-–—]\s+")
COMMON = 0.04  # share of the sentences a word is in, at least, to be a formula's word
COMMON_LEAST = 3  # sentences a formula's word is in, at least


def formula_words(sentence_words: Sequence[frozenset[str]]) -> frozenset[str]:
    """The words that are in so many of the sentences that a clause made of them alone says
    nothing about any one of them."""
    df: dict[str, int] = {}
    for words in sentence_words:
        for w in words:
            df[w] = df.get(w, 0) + 1
    least = max(COMMON_LEAST, COMMON * len(sentence_words))
    return frozenset(w for w, n in df.items() if n >= least)


def excerpt(sentence: str, formula: frozenset[str]) -> str:
    """`sentence` less its leading and trailing formula clauses, "…" where they were; the
    sentence itself when it has none, or when nothing with words of its own would remain."""
    start = 0
    for m in LEAD_END.finditer(sentence):
        if not _formula(sentence[: m.start()], formula):
            break  # a longer lead-in holds this one's words too
        start = m.end()
    end = len(sentence)
    for m in TAIL_START.finditer(sentence, start):
        if _formula(sentence[m.end() :], formula):
            end = m.start()
            break  # the earliest start that leaves only formula words: the longest tail
    core = sentence[start:end]
    if (start, end) == (0, len(sentence)) or not (words_of(core) - formula):
        return sentence
    return f"{ELLIPSIS} " * bool(start) + core + f" {ELLIPSIS}" * (end < len(sentence))


def _formula(clause: str, formula: frozenset[str]) -> bool:
    """A clause with no value, quantity, time or obligation, all of whose words are common."""
    return (
        not CONCRETE.search(clause)
        and not MODAL.search(clause)
        and not stated(clause)
        and words_of(clause) <= formula
    )
