"""A session replayed turn by turn through the live compile path, no model called.

`compile_turn` is the one seam to the proxy: a request's view at a window with a
configuration, from the branch's previous decisions, as an exchange compiles it (the pairing
policy, the recall tool's room, the calibration). The runner carries the decisions across
turns as the store does: each turn starts from the newest state on the longest prefix of its
history."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from proxy.compile.tokens import TokenCounter
from proxy.compile.view import Compiled, answer_reserve, compile_request
from proxy.errors import ProxyError
from proxy.exchange import pairing
from proxy.recall import tool as recall
from proxy.replay.session import Session, Turn
from proxy.settings import Settings
from proxy.store.digest import hash_messages
from proxy.store.states import Prior
from strategies.messages import canonical_bytes


@dataclass(frozen=True)
class Config:
    """One configuration to replay under: the settings and the window (None: no compaction)."""

    name: str
    settings: Settings
    window: int | None
    fixed_tokens: int = 0  # what the source lacks (system prompt, tools), counted in every turn
    tools: bool = True  # whether the upstream takes tools (the recall tool's room)


@dataclass(frozen=True)
class TurnResult:
    """One replayed turn: the figures a report shows, the view for comparisons."""

    number: int
    label: str
    messages: int
    original: int  # the whole history's prompt tokens, fixed tokens included
    sent: int  # the view's
    budget: int | None
    reserve: int
    fired: list[str]  # passes that fired on this turn
    reuse: int  # tokens of the view's prefix shared with the previous turn's (expected cached)
    full_reuse: int  # the same for the full history sent as it came
    view: list[dict[str, Any]] = field(repr=False)
    error: str | None = None  # a refused turn: why
    same_as_live: bool | None = None  # stored sessions: the view's bytes equal what went upstream

    window: int | None = None
    events: list[dict[str, Any]] = field(default_factory=list, repr=False)  # as stored live

    @property
    def overflows(self) -> bool:
        """Whether the full history and its answer's reserve would not have fit the window."""
        return self.window is not None and self.original + self.reserve > self.window


@dataclass
class Replayed:
    session: Session
    config: Config
    turns: list[TurnResult] = field(default_factory=list)


def compile_turn(
    body: dict[str, Any],
    config: Config,
    counter: TokenCounter,
    prior: Prior | None,
    factor: float = 1.0,
) -> Compiled:
    """The view the proxy compiles for `body` (neutral chat form) with `prior` as the branch's
    stored decisions: the request checked and repaired by the pairing policy, the recall tool
    counted where it would be offered. Raises ProxyError where the proxy refuses."""
    settings = config.settings
    sendable = pairing.apply_policy(body, settings.compaction.invalid_pairing)
    fresh = sendable["messages"] is not body["messages"]  # a repaired history compiles afresh
    offered = settings.recall.enabled and recall.wanted(sendable, config.tools)
    counted = recall.with_tool(sendable) if offered else sendable
    compiled = compile_request(
        counted,
        window=config.window,
        settings=settings.compaction,
        counter=counter.corrected(factor),
        prior=None if fresh or prior is None else prior.state,
        fixed=config.fixed_tokens,
    )
    if prior is not None and compiled.tokens_original < prior.tokens_original:
        compiled = dataclasses.replace(compiled, tokens_original=prior.tokens_original)
    return compiled


class _Branches:
    """The decisions recorded so far, found as the store finds them: by history prefix."""

    def __init__(self) -> None:
        self._by_prefix: dict[str, Prior] = {}

    def find(self, chain: list[str]) -> Prior | None:
        for key in reversed(chain):
            if key in self._by_prefix:
                return self._by_prefix[key]
        return None

    def keep(self, chain: list[str], prior: Prior) -> None:
        if chain:
            self._by_prefix[chain[-1]] = prior


def replay(session: Session, config: Config, counter: TokenCounter) -> Replayed:
    out = Replayed(session, config)
    branches = _Branches()
    before: Turn | None = None
    view: list[dict[str, Any]] = []
    for number, turn in enumerate(session.turns, 1):
        result = _one(number, turn, config, counter, branches, (before, view))
        out.turns.append(result)
        before, view = turn, result.view
    return out


def _one(
    number: int,
    turn: Turn,
    config: Config,
    counter: TokenCounter,
    branches: _Branches,
    last: tuple[Turn | None, list[dict[str, Any]]],
) -> TurnResult:
    messages = turn.body.get("messages") or []
    chain = _prefix_chain(messages)
    prior = branches.find(chain)
    factor = turn.factor if turn.factor is not None else 1.0
    fixed = config.fixed_tokens
    try:
        compiled = compile_turn(turn.body, config, counter, prior, factor)
    except ProxyError as exc:
        return _refused(number, turn, config, counter, factor, exc)
    if compiled.state is not None:
        state = compiled.state
        done = Prior(state, factor, compiled.raw_prompt, None, compiled.tokens_original)
        branches.keep(chain, done)
    reuse, full_reuse = _reuse(turn, compiled, last, counter.corrected(factor), fixed)
    live = turn.live_view
    # Compared only where the replay runs at the window the live compile had.
    compared = live is not None and turn.window == config.window
    same = _bytes(live) == _bytes(compiled.messages) if compared and live is not None else None
    return TurnResult(
        number,
        turn.label,
        len(messages),
        compiled.tokens_original + fixed,
        compiled.tokens_compiled + fixed,
        compiled.prompt_budget,  # the fixed tokens included, as tool definitions are
        compiled.reserve,
        list(dict.fromkeys(e.label for e in compiled.events if not e.replayed)),
        reuse,
        full_reuse,
        compiled.messages,
        same_as_live=same,
        window=config.window,
        events=[e.to_dict() for e in compiled.events],
    )


def _refused(
    number: int, turn: Turn, config: Config, counter: TokenCounter, factor: float, exc: ProxyError
) -> TurnResult:
    """A turn the proxy would have refused: nothing sent, the full history counted (as any
    turn's is: the same compile, at no window)."""
    messages = turn.body.get("messages") or []
    uncompacted = dataclasses.replace(config, window=None)
    whole = compile_turn(turn.body, uncompacted, counter, None, factor).tokens_original
    whole += config.fixed_tokens
    window = config.window
    reserve = answer_reserve(turn.body, window, config.settings.compaction) if window else 0
    error = exc.body()["error"]["message"]
    return TurnResult(
        number,
        turn.label,
        len(messages),
        whole,
        0,
        None,
        reserve,
        [],
        0,
        0,
        [],
        error,
        None,
        window=config.window,
    )


def _reuse(
    turn: Turn,
    compiled: Compiled,
    last: tuple[Turn | None, list[dict[str, Any]]],
    counter: TokenCounter,
    fixed: int,
) -> tuple[int, int]:
    """Tokens the previous turn's prompt shares with this one's, from its start (the fixed
    part, the tools where they are the same, then messages): for the view, and for the full
    history sent as it came."""
    before, view = last
    if before is None:
        return 0, 0
    tools = compiled.tools - fixed if before.body.get("tools") == turn.body.get("tools") else 0
    messages = turn.body.get("messages") or []
    return (
        fixed + tools + _shared(view, compiled.messages, counter),
        fixed + tools + _shared(before.body["messages"], messages, counter),
    )


def _shared(old: list[dict[str, Any]], new: list[dict[str, Any]], counter: TokenCounter) -> int:
    """Tokens of the messages `new` starts with as `old` did: what a prefix cache keeps."""
    k = 0
    for a, b in zip(old, new, strict=False):
        if a is not b and a != b:
            break
        k += 1
    # Counts of a history's prefix seen before come from memory (TokenCounter.message_counts).
    return counter.estimate(sum(counter.message_counts(new[:k]))) if k else 0


def _prefix_chain(messages: list[dict[str, Any]]) -> list[str]:
    from proxy.store import history

    return history.prefix_chain(hash_messages(messages))


def _bytes(messages: list[dict[str, Any]]) -> list[bytes]:
    return [canonical_bytes(m) for m in messages]
