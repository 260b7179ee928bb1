"""Refs a view names, and what each gives back: one resolver for /v1/retrieve and `ctxproxy mcp`.

A view names what it left out in these forms, and every one of them is read here:
- `/messages/<hash prefix>`: a placeholder's, a cut's or a ledger pointer's original
  (strategies.messages.recall_ref), found among the messages the key's own sessions hold, as
  the audit's `/messages/{hash}` finds it (the bare hash is taken too);
- `history:<n>` and `history:<a>-<b>`: positions in the session's raw history, the form
  ctxproxy_recall takes, read from the session's latest branch;
- the forget marker's "history positions 3-9, 12": each span listed there is `history:3-9`,
  `history:12` (a span the marker elides with "…" is not named).
A position needs the session; a session another client key made is unknown (404), as in the audit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from proxy.errors import BadRequest, NotFound
from proxy.store import AmbiguousPrefix, Store, StoredMessage

MAX_REF = 200  # characters: the longest ref any view writes is a 64-hex hash or a span
# A position of more digits than any history has is past its end: read as BEYOND, it never
# reaches int() (which refuses 4,300+ digits), range() or the database.
MAX_DIGITS = 18
BEYOND = 10**MAX_DIGITS
_HASH = r"/messages/([0-9a-fA-F]{12,64})"
_SPAN = r"history:(\d{1,18})(?:-(\d{1,18}))?"
# As a URL path or a model's call carries it: the leading slash may go, a prefix of 8 hex
# characters is taken, spaces may stand around the dash; the bare hash is taken too.
_REF = re.compile(
    r"/?messages/([0-9a-fA-F]{8,64})|history:(\d+)(?:\s*-\s*(\d+))?|([0-9a-fA-F]{12,64})"
)
_NAMED = re.compile(rf"{_HASH}|{_SPAN}")
# The forget marker's list of what it left out (strategies/forget.py: marker_text).
_MARKER_SPANS = re.compile(r"history positions ((?:\d+(?:-\d+)?|…)(?:, (?:\d+(?:-\d+)?|…))*)")
FORMS = '"/messages/<12 to 64 hex characters>", "history:<n>" or "history:<a>-<b>"'


@dataclass(frozen=True)
class Ref:
    digest: str | None  # a hash prefix, or None for positions
    first: int = 0
    last: int = 0

    def __str__(self) -> str:
        if self.digest is not None:
            return f"/messages/{self.digest}"
        return f"history:{self.first}" + (f"-{self.last}" if self.last != self.first else "")


@dataclass(frozen=True)
class Item:
    position: int | None  # in the session's raw history, for a position ref
    ref: str  # the message's own ref, its full hash
    message: dict[str, Any]


@dataclass(frozen=True)
class Retrieved:
    ref: str
    session: str | None  # where the positions were read; None for a hash
    messages: list[Item]

    def answer(self) -> dict[str, Any]:
        """What both doors give: every message, and a single one's `message` and `content`."""
        out: dict[str, Any] = {
            "ref": self.ref,
            "session": self.session,
            "messages": [vars(item) for item in self.messages],
        }
        if len(self.messages) == 1:
            message = self.messages[0].message
            out |= {"message": message, "content": message.get("content")}
        return out


def read(text: str) -> Ref | None:
    """A ref in any form a view names it, None for anything else: the one reading of refs,
    for /v1/retrieve, `ctxproxy mcp` and the ctxproxy_recall tool."""
    m = _REF.fullmatch(text.strip())
    if m is None:
        return None
    digest, first, last, bare = m.groups()
    if digest or bare:
        return Ref((digest or bare).lower())
    a, b = (int(x) if len(x.lstrip("0")) <= MAX_DIGITS else BEYOND for x in (first, last or first))
    return Ref(None, min(a, b), max(a, b))


def parse(text: str) -> Ref:
    """A ref in any form a view names it; a clear 400 for anything else."""
    given = text.strip()
    ref = read(given) if len(given) <= MAX_REF else None
    if ref is None:
        shown = given[:80] + ("…" if len(given) > 80 else "")
        raise BadRequest(f"'{shown}' is not a ref: refs are {FORMS}", param="ref")
    return ref


def named_in(text: str) -> list[str]:
    """Every ref a view's text names, each once, in a form parse() takes."""
    found = {m.group(0) for m in _NAMED.finditer(text)}
    for listed in _MARKER_SPANS.findall(text):
        found.update(f"history:{span}" for span in listed.split(", ") if span != "…")
    return sorted(found)


def resolve(store: Store, text: str, key_id: str | None, session_id: str | None) -> Retrieved:
    """What `text` names, for the client key `key_id` (None: the operator, who sees all)."""
    ref = parse(text)
    if ref.digest is not None:
        return Retrieved(str(ref), None, [_by_hash(store, ref.digest, key_id)])
    if session_id is None:
        raise BadRequest(
            f"'{ref}' is a position in a session's history: name the session (over HTTP "
            "the X-Session-Id header or the /s/<id>/ path prefix, over MCP `session_id`)",
            param="session",
        )
    found, owner = store.session_owner(session_id)
    span = None
    if found and (key_id is None or owner == key_id):
        span = store.history_span(session_id, ref.first, ref.last)
    if span is None:
        raise NotFound(f"No session '{session_id}'", param="session")
    length, chosen = span
    if not chosen:
        raise NotFound(
            f"Session '{session_id}' has positions 0-{length - 1}; {ref} is past its end",
            param="ref",
        )
    items = [Item(m.position, f"/messages/{m.hash}", m.message) for m in chosen]
    return Retrieved(str(ref), session_id, items)


def _by_hash(store: Store, digest: str, key_id: str | None) -> Item:
    found = stored_message(store, digest, key_id, param="ref")
    return Item(None, f"/messages/{found.hash}", found.message)


def stored_message(store: Store, digest: str, key_id: str | None, *, param: str) -> StoredMessage:
    """The stored message a hash or unique prefix names, among `key_id`'s sessions (all of
    them for None); a 400 for an ambiguous prefix, a 404 for none, naming `param`."""
    try:
        found = store.get_message(digest, key_id)
    except AmbiguousPrefix:
        raise BadRequest(
            f"'{digest}' is the prefix of several messages; give more of the hash",
            param=param,
            code="ambiguous_hash",
        ) from None
    if found is None:
        raise NotFound(f"No stored message '{digest}'", param=param)
    return found
