"""One conversation, one session: continuations and side requests join the session they belong to.

A client without a session header is placed by its history's fingerprint
(proxy/sessions/identify.py). Two kinds of request get a new fingerprint and still belong to a
conversation already under way, and are told by what they hold, not by a keyword:

- a **continuation** (`qwen -c`) resends the whole earlier conversation after a first message
  rebuilt for the new run (Qwen Code's holds the directory tree, which changes between runs):
  its messages after the first user message begin with a recent session's latest history after
  its own first user message, the recorded answer included, at least 64 characters of it. It
  joins that session, and so do the rest of its run's requests (its fingerprint is remembered).
- a **side request** the agent makes about its own conversation: it carries it on under another
  system prompt (its first message, at least 64 characters, is one of a recent session's: Qwen
  Code's memory subagent), or, offering no tools, is mostly text already seen in one recent
  session's requests and answers (aider's history summaries, title requests).

How far joining reaches, so that nothing can be read by quoting it: a request joined to a
session is filed there, but its view is its own messages (a stored state is found by a prefix
of the request's own history; recall searches the request's own messages), and a side request
is told the session's id (X-Ctxproxy-Session) only when it came with a client key, which it
shares with the session; without keys it is told nothing. A continuation, which resends the
session's whole latest history, answers included, is told its id.

Everything is scoped by the client key. The index is per process, of the most recent sessions,
and rebuilt as requests arrive: after a restart, or on another worker, such a request opens a
session of its own as before. Each session's lines are charged to the shared cache budget
(`cache_mb`): when it needs room, the least recently used session's lines go, as any cache's.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from itertools import compress
from operator import itemgetter
from typing import Any, NamedTuple

from proxy.sessions.identify import SessionKey
from strategies.budget import SHARED, CacheBudget
from strategies.prefix import PrefixMemo

MIN_LINE = 24  # shorter lines ("# USER", "Ok.") say nothing about which conversation it is
QUOTED = 0.5  # share of a side request's text that must be lines of the one conversation
MIN_QUOTED = 64  # characters at least, so a short new chat never joins an older one
SESSIONS = 256  # recent fingerprint sessions remembered per process
LINES = 2_000  # lines remembered per session (the newest): ~0.3 MB a session at most
# What the index holds per line and per message, charged to the budget (tracemalloc over 32
# sessions of 2,000 lines: 172 bytes a line, messages included; a line's one holder is kept as
# the session's id rather than a set, which took ~380 bytes a line).
LINE_BYTES = 165
MESSAGE_BYTES = 80
# A continuation that resends less than two whole exchanges must also share a line of its first
# user message with the session's: one recorded answer alone (a canned refusal) is no proof.
SHORT_HISTORY = 3
MARKS = 8  # positions from a history's end where the one indexed last may end (a retry, a turn)
SKIPPED = ("system", "developer")  # prompts, not the conversation itself
Said = tuple[Any, int, str]  # a message of the conversation: role, identity (`_identity`), text


@dataclass
class History:
    """A session's latest conversation after its first user message, as one chained hash."""

    length: int  # messages
    chain: int  # the chained hash of those messages (see `_chains`)
    chars: int  # their text's length: a continuation must resend something substantial
    last: int  # the request's last message: an answer to it extends this history
    first: frozenset[int] = frozenset()  # the first user message's lines, hashed
    answered: bool = False


class Conversations:
    """Recent fingerprint sessions: their histories, and the lines of their messages."""

    def __init__(
        self, sessions: int = SESSIONS, lines: int = LINES, budget: CacheBudget | None = None
    ) -> None:
        self.max_sessions, self.max_lines = sessions, lines
        # session -> its line hashes, oldest first
        self.lines: OrderedDict[str, OrderedDict[int, None]] = OrderedDict()
        self.seen: dict[str, set[int]] = {}  # session -> its messages, hashed (`_identity`)
        # line hash -> the session holding it, or the sessions (a set) when several do
        self.where: dict[int, str | set[str]] = {}
        self.histories: dict[str, History] = {}
        self.continues: OrderedDict[str, str] = OrderedDict()  # fingerprint -> its session
        # session -> the last messages' readings as of its last index, by position, last first
        self.indexed: dict[str, list[tuple[int, Read]]] = {}
        # Each session's index charged to the budget; what it evicts (on whichever thread
        # needed the room) is forgotten here by the next call, on this index's own thread.
        self._charged = (budget or SHARED).cache("conversations.lines", self._evicted)
        self._evicted_sessions: list[str] = []

    def place(self, key: SessionKey, body: dict[str, Any]) -> SessionKey:
        """`key`, or the session this request continues or is about; the request is indexed."""
        if key.source != "fingerprint":
            return key
        self._settle()
        messages, read = reading(body)
        home = self.continues.get(key.id)
        if home is None and key.id not in self.lines:
            said = _said(read)
            side = self._carried_on(said, key.owner)
            if side is None and (home := self._continuing(said, key.owner)) is None:
                side = None if body.get("tools") else self._quoted(said, key.owner)
            if side is not None:  # a request about the conversation, not a turn of it
                return SessionKey(side, "side", key.owner)
            if home is not None:
                self._remember(key.id, home)
        if home is not None and home in self.lines:
            self._index(home, read)
            self._charge(home)
            return SessionKey(home, "continued", key.owner)
        self._index(key.id, read)
        self._charge(key.id)
        return key

    def answered(
        self, session: str, messages: list[dict[str, Any]], answer: dict[str, Any] | None
    ) -> None:
        """The answer to a request of `session`: side requests quote it, a continuation
        resends it after the history it answered."""
        self._settle()
        if session not in self.lines or not isinstance(answer, dict):
            return
        identity, text = _identity(answer)
        self._add_text(session, identity, text)
        self._charge(session)
        history = self.histories.get(session)
        # Only the answer to the session's latest request extends its history (not a side
        # request's, placed in the same session, nor an earlier request's answered late).
        last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
        if history is None or history.answered or _identity(last)[0] != history.last:
            return
        history.chain = hash((history.chain, identity))
        history.length, history.chars = history.length + 1, history.chars + len(text)
        history.answered = True

    def _carried_on(self, said: list[Said], owner: str | None) -> str | None:
        """The session whose conversation this one carries on under another system prompt
        (Qwen Code's memory subagent resends the conversation itself): its first message."""
        if not said or len(said[0][2]) < MIN_QUOTED:
            return None
        return next((s for s in self._recent(owner) if said[0][1] in self.seen[s]), None)

    def _continuing(self, said: list[Said], owner: str | None) -> str | None:
        """The session whose whole latest history this request resends after its first
        user message (a continued run), if any."""
        chains = _chains(said)[0]
        first = _first_lines(said)
        for session in self._recent(owner):
            history = self.histories.get(session)
            if history is None or history.chars < MIN_QUOTED or history.length >= len(chains):
                continue
            if history.length < SHORT_HISTORY and not history.first & first:
                continue
            if chains[history.length] == history.chain:
                return session
        return None

    def _quoted(self, said: list[Said], owner: str | None) -> str | None:
        """The one session whose lines make up most of these messages' text, if any. Only what
        the request's user messages say counts: a side request quotes the conversation in its
        prompt, while a new conversation that merely got the same answer holds it as a turn."""
        lines = [line for role, _, text in said if role == "user" for line in _split(text)]
        total = sum(len(line) for line in lines) or 1
        quoted: dict[str, int] = {}
        for line in dict.fromkeys(lines):
            holders = self.where.get(hash(line), ())
            for session in (holders,) if isinstance(holders, str) else holders:
                quoted[session] = quoted.get(session, 0) + len(line)
        mine = {s: n for s, n in quoted.items() if _owned(s, owner)}
        best = max(mine, key=mine.__getitem__, default=None)
        if best is None or mine[best] < max(MIN_QUOTED, QUOTED * total):
            return None
        return best

    def _recent(self, owner: str | None) -> list[str]:
        return [s for s in reversed(self.lines) if _owned(s, owner)]

    def _remember(self, fingerprint: str, home: str) -> None:
        self.continues[fingerprint] = home
        while len(self.continues) > self.max_sessions:
            self.continues.popitem(last=False)

    def _index(self, session: str, read: list[Read]) -> None:
        self.lines.setdefault(session, OrderedDict())
        self.lines.move_to_end(session)
        end = read[-1] if read else None
        if end is not None and end.started:
            last = end.said[1] if end.said is not None else 0
            first = _first_lines(filter(None, map(_SAID, read)))  # stops at the first user's
            self.histories[session] = History(end.length, end.chain, end.chars, last, first)
        # Agents rewrite their histories (aider moves finished exchanges ahead of its file
        # messages): index every message not indexed before, not only the tail. A history
        # that starts with the one indexed last time (its reading's very objects: the memo
        # reuses them only for the same messages) has only its tail to look at.
        done = self.seen.setdefault(session, set())
        upto = next((i for i, m in self.indexed.get(session, ()) if _at(read, i) is m), -1)
        said = _said(read[upto + 1 :])
        tail = range(len(read) - 1, max(len(read) - 1 - MARKS, -1), -1)
        self.indexed[session] = [(i, read[i]) for i in tail]
        identities = list(map(_IDENTITY, said))  # at C speed: a resent history's are known
        fresh = set(identities) - done
        new = list(compress(said, map(fresh.__contains__, identities)))
        # Only a session's newest lines are kept: older messages, whose lines the newer ones
        # would push out, are noted but not split (a long history's first request is cheap).
        start, lines = len(new), 0
        while start > 0 and lines < self.max_lines:
            start -= 1
            lines += len(_split(new[start][2]))
        done.update(s[1] for s in new[:start])
        for _, identity, text in new[start:]:
            self._add_text(session, identity, text)
        while len(self.lines) > self.max_sessions:
            self._forget(next(iter(self.lines)))

    def _add_text(self, session: str, identity: int, text: str) -> None:
        done = self.seen.setdefault(session, set())
        if identity in done:
            return
        done.add(identity)
        lines = self.lines[session]
        for line in _split(text):
            h = hash(line)
            if h in lines:
                continue
            lines[h] = None
            holders = self.where.setdefault(h, session)
            if holders != session:  # a second holder: a set
                if isinstance(holders, str):
                    self.where[h] = {holders, session}
                else:
                    holders.add(session)
            if len(lines) > self.max_lines:  # the oldest line goes
                oldest, _ = lines.popitem(last=False)
                self._drop(session, oldest)

    def _charge(self, session: str) -> None:
        """Charge the session's index to the budget; what the budget will not keep (no room
        configured, a request too large to be a working set) is not kept here either."""
        size = LINE_BYTES * len(self.lines[session]) + MESSAGE_BYTES * len(self.seen[session])
        if not self._charged.put(session, None, size):
            self._forget(session)
        self._settle()  # the room it took

    def _evicted(self, session: Hashable, _: Any) -> None:
        self._evicted_sessions.append(str(session))  # list.append: safe from any thread

    def _settle(self) -> None:
        """Forget the sessions the budget evicted since the last call."""
        while self._evicted_sessions:
            session = self._evicted_sessions.pop()
            if session not in self._charged:  # not charged again since
                self._forget(session)

    def _forget(self, session: str) -> None:
        self._charged.pop(session)
        for h in self.lines.pop(session, ()):
            self._drop(session, h)
        self.seen.pop(session, None)
        self.indexed.pop(session, None)
        self.histories.pop(session, None)
        for fingerprint in [f for f, s in self.continues.items() if s == session]:
            del self.continues[fingerprint]

    def _drop(self, session: str, h: int) -> None:
        holders = self.where.get(h)
        if holders is None:
            return
        if isinstance(holders, str):
            if holders == session:
                del self.where[h]
            return
        holders.discard(session)
        if len(holders) == 1:
            self.where[h] = holders.pop()


def told_id(key: SessionKey) -> str | None:
    """The session id a request placed as `key` may be told, or None: the one way a session id
    leaves ctxproxy in an answer (header, body, a response id's continuation, an error).

    A side request is told only with a client key, which it shares with the session; without
    keys a stranger quoting a conversation learns nothing of it (see the module)."""
    if key.source == "side" and key.owner is None:
        return None
    return key.id


def told(key: SessionKey) -> dict[str, str]:
    """The X-Ctxproxy-Session header for a request placed as `key`, where it may be told."""
    session = told_id(key)
    return {} if session is None else {"x-ctxproxy-session": session}


class Read(NamedTuple):
    """A message as the index reads it, with the conversation's `_chains` up to it."""

    said: Said | None  # None for a prompt
    started: bool  # at or after the first user message
    chain: int  # the chained hash of the conversation after the first user message …
    length: int  # … its messages …
    chars: int  # … and their text's length


# A resent history's messages, read (by content: any app's index reads them alike), charged to
# the shared cache budget: a list over an eighth of it (8 MB by default) is not kept.
_READ: PrefixMemo[Read] = PrefixMemo("conversations.read", value_bytes=470, holds_text=True)


def reading(body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[Read]]:
    """The request's messages (dicts only) and their reading; the checks before the exchange
    call this on a worker thread for a long history, so that `place` finds it done."""
    sent = body.get("messages")
    sent = sent if isinstance(sent, list) else []
    messages = sent if _all_dicts(sent) else [m for m in sent if isinstance(m, dict)]
    return messages, _READ.values(messages, lambda known: _read(messages[len(known) :], known))


def _read(messages: list[dict[str, Any]], before: list[Read]) -> list[Read]:
    """`messages`, read after the messages `before` (whose reading is known)."""
    started, chain, length, chars = before[-1][1:] if before else (False, 0, 0, 0)
    out = []
    for m in messages:
        role = m.get("role")
        if role in SKIPPED:
            out.append(Read(None, started, chain, length, chars))
            continue
        identity, text = _identity(m)
        if started:
            chain, length, chars = hash((chain, identity)), length + 1, chars + len(text)
        started = started or role == "user"
        out.append(Read((role, identity, text), started, chain, length, chars))
    return out


_SAID, _IDENTITY = itemgetter(0), itemgetter(1)


def _all_dicts(messages: list[Any]) -> bool:
    return set(map(type, messages)) <= {dict}


def _chains(said: list[Said]) -> tuple[list[int], int]:
    """Chained hashes of the conversation after the first user message (`chains[n]` covers
    its first n messages, `chains[0]` none), and its length in characters."""
    first = next((i for i, (role, _, _) in enumerate(said) if role == "user"), len(said))
    chains, chars = [0], 0
    for _, identity, text in said[first + 1 :]:
        chains.append(hash((chains[-1], identity)))
        chars += len(text)
    return chains, chars


def _at(read: list[Read], i: int) -> Read | None:
    return read[i] if 0 <= i < len(read) else None


def _said(read: list[Read]) -> list[Said]:
    return list(filter(None, map(_SAID, read)))  # at C speed: prompts' are None


def _first_lines(said: Iterable[Said]) -> frozenset[int]:
    first = next((text for role, _, text in said if role == "user"), "")
    return frozenset(hash(line) for line in _split(first))


def _identity(message: dict[str, Any]) -> tuple[int, str]:
    """A message's hash by what a client resends of it (role, text, tool calls), and its text
    with the calls' names and arguments: clients resend ids and spacing as they like."""
    text = _text(message)
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                arguments = "".join(str(function.get("arguments")).split())
                text += f"\n{function.get('name')}({arguments})"
    return hash((message.get("role"), text)), text


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _split(text: str) -> list[str]:
    """The text line by line, stripped; long enough lines only."""
    return [s for line in text.splitlines() if len(s := line.strip()) >= MIN_LINE]


def _owned(session: str, owner: str | None) -> bool:
    return owner is None or session.startswith(owner + ":")
