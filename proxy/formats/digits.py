"""Whether a request body holds a run of 19 digits (an integer that may pass 64 bits, which orjson
would read as a float), looking only at the bytes after what a recent body already cleared: an
agent resends its whole history each turn, so a turn's new bytes are a short tail.

A body that starts with the first p bytes of a body found clear holds no such run before p - 18.
Recent clear bodies are kept by their first HEAD bytes (the model and the start of the prompts),
a few per head, charged to the shared cache budget."""

from __future__ import annotations

from proxy import sizes
from strategies.budget import SHARED

# Bytes to digits ("0") or not (" "): a run of 19 digits may be an integer past 64 bits.
_DIGITS = bytes(48 if 48 <= i <= 57 else 32 for i in range(256))
_LONG_NUMBER = b"0" * 19
HEAD = 256  # bytes that key a body's kin
KEEP = 8  # recent clear bodies kept per head (sessions that share their prompts' start)
CHUNK = 16 << 10  # bytes compared at a time when finding how much two bodies share

_clear = SHARED.cache("chat.digits")


def long_number(raw: bytes) -> bool:
    """Whether `raw` holds 19 or more digits in a row anywhere (in a string too)."""
    if len(raw) < sizes.MEMO_FROM_BYTES:
        return _scan(raw)
    head = raw[:HEAD]
    kin: tuple[bytes, ...] = _clear.get(head) or ()
    shared, near = 0, None
    for body in kin:  # newest first: a session's previous turn is usually the first
        n = shared_prefix(raw, body)
        if n > shared:
            shared, near = n, body
        if shared > len(body) // 2:
            break
    if _scan(raw, max(0, shared - len(_LONG_NUMBER) + 1)):
        return True
    # This body stands in for the one it continues; the others stay, newest first.
    kept = (raw, *(b for b in kin if b is not near))[:KEEP]
    while kept and not _clear.put(head, kept, sum(map(len, kept))):
        kept = kept[:-1]  # too large for the budget: fewer (a lone huge body: none)
    return False


def _scan(raw: bytes, start: int = 0) -> bool:
    return _LONG_NUMBER in (raw[start:] if start else raw).translate(_DIGITS)


def shared_prefix(a: bytes, b: bytes) -> int:
    """A length, within CHUNK below the longest, of a prefix `a` and `b` share: compared a
    CHUNK at a time at C speed, without a copy."""
    n, view, at = min(len(a), len(b)), memoryview(b), 0
    while at < n:
        end = min(at + CHUNK, n)
        if not a.startswith(view[at:end], at):
            break
        at = end
    return at
