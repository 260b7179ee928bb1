"""Which /v1/* paths the pass-through may forward: canonical ones inside the upstream's base."""

from __future__ import annotations

import re
from urllib.parse import quote

from proxy.errors import BadRequest, MethodNotAllowed

# The chat endpoint has a route of its own (recorded, compacted, pairing-checked, logged): a
# variant of its path must never reach the upstream's chat endpoint around it.
CHAT_PATH = "chat/completions"
# Forwarded methods: what OpenAI-compatible model servers serve under /v1 for inference and
# listing. PUT, PATCH and DELETE administer a server, which is the operator's business.
FORWARDED_METHODS = ["GET", "POST"]
# Anything that a server, a proxy or httpx could read as another path, a query or a fragment.
_UNSAFE = re.compile(r"[\x00-\x20\x7f\\?#%;]")


class InvalidPath(BadRequest):
    code = "invalid_path"


def forwardable(path: str, method: str) -> str:
    """The path to send upstream (percent-encoded), or a 400/405 saying why it is refused.

    `path` is the decoded remainder after /v1/: empty, `.` and `..` segments, and characters
    that change a URL's meaning, are refused rather than normalised, so that what is checked is
    exactly what the upstream receives.
    """
    segments = path.split("/")
    if any(s in ("", ".", "..") for s in segments) or _UNSAFE.search(path):
        raise InvalidPath(
            "Invalid path: use the canonical /v1/… form, without empty, '.' or '..' segments "
            "or encoded separators",
            param="path",
        )
    if path.lower() == CHAT_PATH:
        raise MethodNotAllowed(f"The chat endpoint is POST /v1/{CHAT_PATH}", allow="POST")
    return "/" + quote(path, safe="/:@!$&'()*+,=-._~")
