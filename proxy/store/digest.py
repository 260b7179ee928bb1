"""Message hashes as strategies.messages.message_hash makes them, without walking each message in
Python first: orjson writes the bytes, and only a message that may hold a float is checked. A
history's hashes and prefix chain: of a prefix sent before, from memory (strategies/prefix.py)."""

from __future__ import annotations

import hashlib
import re
from functools import partial
from operator import itemgetter
from typing import Any

import orjson

from proxy.store import history
from strategies.budget import SHARED
from strategies.messages import message_hash
from strategies.prefix import PrefixMemo

# Where orjson's output may hold a number with a fraction or an exponent: a float, which
# orjson may write otherwise than the standard encoder. Inside a string such bytes are only
# a false alarm (the exact path runs); outside one, every float matches.
_MAYBE_FLOAT = re.compile(rb"[:,\[]-?[0-9]+[.eE]")


# orjson's bytes' digest -> message_hash, for messages already seen: an agent resends its
# whole history every turn, and only the new messages need the float scan.
HASH_BYTES = 360  # an entry as tracemalloc sees it: key, hex digest, the budget's tuples
_seen = SHARED.cache("digest.seen")


def fast_message_hash(msg: Any) -> str:
    """message_hash(msg), the same hex digest, for a fraction of the time on common messages."""
    try:
        data = orjson.dumps(msg, option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONEncodeError, TypeError):  # surrogates, big integers, odd keys
        return message_hash(msg)
    digest = hashlib.sha256(data)
    key = digest.digest()
    known: str | None = _seen.get(key)
    if known is not None:
        return known
    exact = message_hash(msg) if _MAYBE_FLOAT.search(data) else digest.hexdigest()
    _seen.put(key, exact, HASH_BYTES)
    return exact


# (message hash, prefix hash) of the histories recent requests sent: a turn hashes only its tail.
_HASHED: PrefixMemo[tuple[str, str]] = PrefixMemo("digest.hashed", value_bytes=460)


def hash_messages(messages: list[dict[str, Any]]) -> history.Hashes:
    """The messages' hashes, with their prefix chain (history.prefix_chain) computed too."""
    pairs = _HASHED.values(messages, partial(_hash_tail, messages))
    hashes = history.Hashes(map(itemgetter(0), pairs))
    hashes.chain = list(map(itemgetter(1), pairs))
    return hashes


def _hash_tail(
    messages: list[dict[str, Any]], known: list[tuple[str, str]]
) -> list[tuple[str, str]]:
    prefix = known[-1][1] if known else ""
    out = []
    for m in messages[len(known) :]:
        h = fast_message_hash(m)
        prefix = history.link(prefix, h)
        out.append((h, prefix))
    return out
