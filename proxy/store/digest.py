"""Message hashes as strategies.base.message_hash makes them, without walking each message in
Python first: orjson writes the bytes, and only a message that may hold a float is checked."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import orjson

from strategies.base import message_hash

# Where orjson's output may hold a number with a fraction or an exponent: a float, which
# orjson may write otherwise than the standard encoder. Inside a string such bytes are only
# a false alarm (the exact path runs); outside one, every float matches.
_MAYBE_FLOAT = re.compile(rb"[:,\[]-?[0-9]+[.eE]")


def fast_message_hash(msg: Any) -> str:
    """message_hash(msg), the same hex digest, for a fraction of the time on common messages."""
    try:
        data = orjson.dumps(msg, option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONEncodeError, TypeError):  # surrogates, big integers, odd keys
        return message_hash(msg)
    if _MAYBE_FLOAT.search(data) is not None:
        return message_hash(msg)
    return hashlib.sha256(data).hexdigest()
