"""Client identity fields (`user`, `safety_identifier`, `metadata.user_id`), kept from
upstreams unless `forward_client_identity` is set: they can hold a device or account id."""

from __future__ import annotations

from typing import Any

# Chat completions' and Responses' top-level fields that identify the end user.
IDENTITY_FIELDS = ("user", "safety_identifier")


def without_identity(body: dict[str, Any]) -> dict[str, Any]:
    """`body` without identity fields: a shallow copy where it had any, else `body` itself.

    Messages' `metadata.user_id` (Claude Code's holds a device id) goes too; the rest of
    `metadata` stays."""
    metadata = body.get("metadata")
    in_metadata = isinstance(metadata, dict) and "user_id" in metadata
    if not in_metadata and not any(k in body for k in IDENTITY_FIELDS):
        return body
    out = {k: v for k, v in body.items() if k not in IDENTITY_FIELDS}
    if isinstance(metadata, dict) and in_metadata:
        rest = {k: v for k, v in metadata.items() if k != "user_id"}
        out.pop("metadata")
        if rest:
            out["metadata"] = rest
    return out
