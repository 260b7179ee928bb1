"""The ledger: what forgotten turns said that the rest of a session depends on, carried verbatim.

A statement is recognised by its form and by who said it, never by one word: from the user,
rules and prohibitions (imperatives, "never"/"must not" forms), constraints, goals,
preferences, decisions and facts with a concrete value; from the assistant, decisions and
facts with a value; from a tool, `key = value` / `key: value` settings in a file it read. The
newest value of a fact wins over older ones. Every forgotten user message is carried (short
ones whole, long pastes as head, evidence and recall pointer) unless the cap leaves no room,
in which case messages with no statement in them leave first, oldest first, then the least
binding statements. The text is a pure function of the raw history and the forgotten set, so
it is the same bytes each time it is rendered.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from strategies.forms import excerpt
from strategies.memo import text_cache
from strategies.messages import Message, recall_ref, text_of, tool_calls

USER_WHOLE_CHARS = 600  # a longer user message (a pasted log or file) is carried folded
USER_HEAD_CHARS = 240
HEADING = "What the forgotten turns said (verbatim, oldest first; newest value of each fact):"
# Kinds in the order they leave when the cap is reached (the first leave first).
ORDER = ("message", "tool-fact", "fact", "decision", "preference", "goal", "constraint", "rule")

_SENTENCE = re.compile(r"(?<=[.!?;])\s+(?=[\"'`(\[A-Z0-9])|\n+")
_LEAD = r"^(?:(?:please|important|note|remember|also|and|so|but|ok(?:ay)?|from now on)[,:]?\s+)*"
RULE = re.compile(
    _LEAD + r"(?:never|don'?t|do not|avoid|always|under no circumstances|stop|no\s+\w+ing\b)"
    r"|\b(?:must(?: not)?|mustn'?t|shall not|should(?: not|n'?t)? (?:ever )?\w+|may not|is not "
    r"allowed|are not allowed|is forbidden|are forbidden|never)\b",
    re.IGNORECASE,
)
CONSTRAINT = re.compile(
    r"\b(?:at most|at least|no more than|no less than|not exceed|maximum|minimum|limit(?:ed)? "
    r"to|within|only (?:use|run|touch|change|edit)|has to be|have to be|needs? to be|required)\b",
    re.IGNORECASE,
)
GOAL = re.compile(
    r"^(?:the |our |my )?(?:main |overall |end |final )?(?:goal|objective|aim|priority|deadline|"
    r"mission)\b|\b(?:we|i) (?:want|need|aim) to\b|\bthe point is\b",
    re.IGNORECASE,
)
PREFERENCE = re.compile(
    r"\bi(?:'d| would)? (?:prefer|like|love|hate|dislike|want)\b|\b(?:prefer|rather than|"
    r"instead of)\b|^(?:my|our) (?:preference|style)\b",
    re.IGNORECASE,
)
DECISION = re.compile(
    r"\b(?:we|i|let'?s|let us)(?: have)?(?:'ll| will| shall)? (?:decided?|chose|choose|"
    r"go(?:ing)? with|settled? on|pick(?:ed)?|switch(?:ed)? to|use)\b|^decision:",
    re.IGNORECASE,
)
# An imperative: the sentence opens with a bare verb (no subject before it).
IMPERATIVE = re.compile(
    _LEAD + r"(?:use|keep|run|make|add|remove|write|put|call|set|name|store|send|deploy|target|"
    r"stick|prefer|ensure|make sure|check|leave|ask|respond|reply|answer|format|sign|tag|"
    r"commit|push|pin|log|test|document|mention|cite|include|exclude|limit|cap|restrict)\b",
    re.IGNORECASE,
)
# A fact: "X is/are/= /: Y" where Y holds a concrete value.
FACT = re.compile(
    r"^(?P<key>[\w`'\"./ -]{2,60}?)\s*(?:=|:|\bis now\b|\bare now\b|\bis set to\b|\bis\b|\bare\b|"
    r"\bmoved to\b|\bchanged to\b|\blives (?:in|at)\b|\bruns on\b)\s*(?P<value>.+)$",
    re.IGNORECASE,
)
CONCRETE = re.compile(
    r"\d|[\w-][/\\][\w.-]|\b\w+[._-]\w+\b|`[^`]+`|\"[^\"]+\"|'[^']{2,}'|\b[A-Z]{2,}\b|"
    r"\b[a-z]+[A-Z]\w*\b|https?://|@"
)
SETTING = re.compile(r"^\s*(?P<key>[A-Za-z_][\w.-]{0,60})\s*[=:]\s*(?P<value>[^\s#].{0,120})$")
CONFIG_FILE = re.compile(
    r"(?:\.env|\.ini|\.toml|\.ya?ml|\.json|\.cfg|\.conf|\.properties|settings\.py|config\.py)\b"
)
PRONOUNS = frozenset({"it", "this", "that", "there", "here", "which", "these", "those"})
PARSED_CHARS = 4000  # of any message, at most, read for statements
TOOL_FACTS = 8  # settings per file read, at most: a long file must not fill the ledger
_ARTICLE = re.compile(r"^(?:the|our|my|a|an)\s+|[`'\"]", re.IGNORECASE)


@dataclass(frozen=True)
class Statement:
    index: int  # raw position of the message it came from
    kind: str  # one of ORDER
    text: str
    key: str | None = None  # a fact's subject, for "the newest value wins"


def kind_of(sentence: str, role: str) -> str | None:
    """What a sentence is, from its form and who said it; None when nothing depends on it."""
    s = sentence.strip()
    if len(s) < 4 or s.endswith("?"):
        return None
    if role == "user":
        for kind, form in (("rule", RULE), ("goal", GOAL), ("constraint", CONSTRAINT)):
            if form.search(s):
                return kind
        if PREFERENCE.search(s):
            return "preference"
        if DECISION.search(s):
            return "decision"
        if fact_key(s):
            return "fact"
        return "rule" if IMPERATIVE.search(s) else None
    if role == "assistant":
        if DECISION.search(s) and CONCRETE.search(s):
            return "decision"
        return "fact" if fact_key(s) else None
    return None


def fact_key(sentence: str) -> str | None:
    """The subject of "X is Y" / "X = Y" / "X: Y" when Y holds a concrete value. A short lead
    before a colon ("Update: the port is now 6432") is not the subject."""
    s = sentence.strip().rstrip(".")
    lead, _, rest = s.partition(": ")
    if rest and len(lead.split()) <= 3 and (key := _fact_key(rest)):
        return key
    return _fact_key(s)


def _fact_key(s: str) -> str | None:
    m = FACT.match(s)
    if m is None or not CONCRETE.search(m["value"]):
        return None
    key = _ARTICLE.sub("", _ARTICLE.sub("", m["key"].strip().lower())).strip()
    return key if key and len(key.split()) <= 6 and key not in PRONOUNS else None


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s and s.strip()]


def statements(raw: Sequence[Message], index: int, names: dict[str, str]) -> list[Statement]:
    """The statements in one raw message."""
    msg = raw[index]
    role, text = str(msg.get("role")), text_of(msg)
    if not text:
        return []
    if role == "tool":
        config = bool(CONFIG_FILE.search(names.get(str(msg.get("tool_call_id")), "")))
        return [Statement(index, *p) for p in _settings(text)] if config else []
    if role == "user" and len(text) > USER_WHOLE_CHARS:
        text = text[:USER_WHOLE_CHARS]  # the user's own words come before what they pasted
    text = text[:PARSED_CHARS]  # statements are short: a huge answer is not read whole
    return [Statement(index, *p) for p in _parse(text, role)]


@text_cache()
def _parse(text: str, role: str) -> tuple[tuple[str, str, str | None], ...]:
    """Cached: the whole history is read again at every firing."""
    out = []
    for s in sentences(text):
        kind = kind_of(s, role)
        if kind is not None:
            out.append((kind, s, fact_key(s) if kind == "fact" else None))
    return tuple(out)


@text_cache()
def _settings(text: str) -> tuple[tuple[str, str, str | None], ...]:
    """`key = value` lines of a configuration file the agent read (not any output's lines)."""
    found: list[tuple[str, str, str | None]] = []
    for line in text.split("\n"):
        m = SETTING.match(line)
        if m and len(found) < TOOL_FACTS:
            found.append(("tool-fact", line.strip(), m["key"].lower()))
    return tuple(found)


def read_targets(raw: Sequence[Message]) -> dict[str, str]:
    """tool_call_id -> what the call names (its arguments as text), to tell a config read."""
    out: dict[str, str] = {}
    for msg in raw:
        for call in tool_calls(msg):
            fn = call.get("function")
            args = fn.get("arguments") if isinstance(fn, dict) else None
            out[str(call.get("id"))] = args if isinstance(args, str) else json.dumps(args)
    return out


def newest_keys(raw: Sequence[Message], names: dict[str, str]) -> dict[tuple[bool, str], int]:
    """(said by the user?, fact subject) -> the raw position of its newest statement, over the
    whole history: only the user's own later word overrides what the user said."""
    newest: dict[tuple[bool, str], int] = {}
    for i in range(len(raw)):
        user = raw[i].get("role") == "user"
        for st in statements(raw, i, names):
            if st.key:
                newest[(user, st.key)] = i
    return newest


@dataclass(frozen=True)
class Entry:
    index: int
    kind: str  # the most binding kind among what the entry carries
    text: str
    short: str  # its statements alone, the form it takes when room runs short


def entries(raw: Sequence[Message], forgotten: Sequence[int]) -> list[Entry]:
    """One entry per forgotten user message and per forgotten statement, oldest first."""
    names = read_targets(raw)
    newest = newest_keys(raw, names)
    out = []
    for i in sorted(forgotten):
        user = raw[i].get("role") == "user"
        found = [
            st
            for st in statements(raw, i, names)
            if st.key is None or newest.get((user, st.key)) == i
        ]
        stale = {st.text for st in statements(raw, i, names) if st not in found}
        if raw[i].get("role") == "user":
            text = _user_form(raw[i], stale)
            if text:
                kinds = [st.kind for st in found] or ["message"]
                short = " ".join(st.text for st in found) if found else text
                kind = max(kinds, key=ORDER.index)
                out.append(Entry(i, kind, f"user: {text}", f"user: {short}"))
        else:
            role = "tool" if raw[i].get("role") == "tool" else "assistant"
            out.extend(Entry(i, st.kind, *[f"{role}: {st.text}"] * 2) for st in found)
    return out


def _user_form(msg: Message, stale: set[str]) -> str:
    """A user message as carried: whole when short (less what a newer fact overrides), else
    its head, its evidence lines and how to recall it."""
    text = text_of(msg) or ""
    if len(text) <= USER_WHOLE_CHARS:
        kept = [s for s in sentences(text) if s not in stale] if stale else [text]
        return " ".join(" ".join(kept or [text]).split())  # never nothing of what they said
    head = " ".join(text[:USER_HEAD_CHARS].split())
    lines = [ln.strip() for ln in excerpt(text)[:3]]
    return " | ".join([f"{head}…", *lines, f"({len(text):,} chars; {recall_ref(msg)})"])


def cap_tokens(budget: int, share: float) -> int:
    return int(budget * share)


def render(
    raw: Sequence[Message],
    forgotten: Sequence[int],
    cap: int,
    size: Callable[[str], int] = len,
) -> str:
    """The ledger within `cap` (in the units of `size`, summed line by line; "" when nothing
    is carried): entries leave by kind (ORDER), oldest first, and the heading says how many
    were left out."""
    all_entries = entries(raw, forgotten)
    if not all_entries or cap <= 0:
        return ""
    lines = {e.text: size(f"- {e.text}") + 1 for e in all_entries}
    lines.update({e.short: size(f"- {e.short}") + 1 for e in all_entries})
    kept = {e.index * 1000 + n: e for n, e in enumerate(all_entries)}  # oldest first
    form = {k: e.text for k, e in kept.items()}
    total = sum(lines[t] for t in form.values()) + size(HEADING + " (0000 left out for room)")
    # Chat with no statement leaves first, then the rest of a message beside its statements,
    # then statements by kind, the least binding and oldest first.
    for stage in ("message", "short", *ORDER[1:], "any"):
        for k in [k for k, e in kept.items() if stage in (e.kind, "short", "any")]:
            if total <= cap:
                break
            if stage == "short":
                total += lines[kept[k].short] - lines[form[k]]
                form[k] = kept[k].short
            else:
                total -= lines[form.pop(k)]
                del kept[k]
    return _text(list(form.values()), len(all_entries)) if form else ""


def _text(kept: list[str], total: int) -> str:
    left = f" ({total - len(kept)} left out for room)" if total > len(kept) else ""
    return "\n".join([HEADING + left, *(f"- {text}" for text in kept)])
