"""The features of a user's sentence that say it carries something: concrete values (numbers,
paths, identifiers, quoted text), quantities and times stated in words, and modality (must,
never, only, at most...), and the words it is made of. Generic features of English and of
technical text, never a keyword list of one benchmark's subjects.
"""

from __future__ import annotations

import re

from strategies.memo import text_cache

_WORD = re.compile(r"[A-Za-z0-9_]+(?:['’][a-z]+)?")
CONCRETE = re.compile(
    r"\d|[\w-][/\\][\w.-]|\b\w+[._-]\w+\b|`[^`\n]+`|\"[^\"\n]+\"|\b[A-Z]{2,}\b|"
    r"\b[a-z]+[A-Z]\w*\b|https?://|@\w"
)
# Modality as a general feature of English: obligation, prohibition, permission, limits.
MODAL = re.compile(
    r"\b(?:must|mustn'?t|should|shouldn'?t|shall|never|always|only|don'?t|do not|does not|"
    r"cannot|can'?t|may not|avoid|required?|requires|prefer(?:red|s)?|forbidden|allowed|"
    r"at (?:most|least)|no (?:more|less|later|earlier) than|maximum|minimum|limit(?:ed)?|"
    r"exactly|without|instead|rather than|need(?:s)? to|has to|have to|ensure|make sure)\b",
    re.IGNORECASE,
)
STOP = frozenset(
    "the a an and or but of to in on at for with by from as is are was were be been it this "
    "that these those there here we i you he she they me my our your its their what which who "
    "how why when where do does did can could would will shall should may might have has had "
    "not no yes so if then than also just very please ok okay thanks thank".split()
)


def information(text: str, held: frozenset[str] = frozenset()) -> float:
    """Values the view does not hold yet (concrete ones by their length, quantities and times
    stated in words one each) and modality count; a question counts less than a statement;
    relay pointers count nothing."""
    score = 0.0
    for sentence in re.split(r"(?<=[.!?])\s+", text):
        if sentence.startswith("[relayed "):
            continue
        values = [m for m in specific(sentence) if m.lower().strip(".,:;") not in held]
        concrete = sum(min(len(m), 8) / 4 for m in values)
        named = [w for w in stated(sentence) if w.lower() not in held]
        value = 0.5 + concrete + len(named) + 1.5 * len(MODAL.findall(sentence))
        score += value * (0.35 if sentence.rstrip().endswith("?") else 1.0)
    return score


def specific(sentence: str) -> list[str]:
    """The concrete tokens of a sentence: numbers, paths, identifiers, quoted text."""
    return [
        w
        for w in re.findall(r"`[^`]+`|\"[^\"]+\"|[\w@/\\.:-]+", sentence)
        if CONCRETE.search(w) and len(w.strip(".:-")) > 1 or len(w) > 2 and w.isdigit()
    ]


# The words English states a quantity or a time with (a closed class, like the digits), and
# its calendar: a statement that carries one is a fact with a value, however it is phrased.
QUANTITY = re.compile(
    r"\b(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|"
    r"fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|"
    r"seventy|eighty|ninety|hundred|thousand|million|billion|dozen|half|twice|double|triple|"
    r"first|second|third|fourth|fifth|tenth|once)\b",
    re.IGNORECASE,
)
WHEN = re.compile(
    r"\b(?:ago|yesterday|today|tonight|tomorrow|weekend|(?:last|next|this) (?:week|month|year|"
    r"time|night|morning|spring|summer|fall|autumn|winter)|(?:mon|tues|wednes|thurs|fri|satur|"
    r"sun)day|january|february|march|april|may|june|july|august|september|october|november|"
    r"december|spring|summer|autumn|winter)\b",
    re.IGNORECASE,
)


def stated(sentence: str) -> list[str]:
    """The quantities and times a sentence states in words: a number word, a date or a
    relative time. (Capitalised names were tried: they cost side constraints among chat
    full of names, so they do not count.)"""
    return [*QUANTITY.findall(sentence), *WHEN.findall(sentence)]


@text_cache()
def words_of(text: str) -> frozenset[str]:
    return frozenset(w for w in _WORD.findall(text.lower()) if w not in STOP and len(w) > 1)
