"""The OpenAPI schema as ctxproxy answers: invalid input is a 400 in OpenAI's error envelope,
not FastAPI's 422 validation body."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

ERROR_ENVELOPE = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "integer", "null"]},
            },
        }
    },
}
INVALID = {
    "description": "Invalid request",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorEnvelope"}}},
}


def install(app: FastAPI, extra_paths: dict[str, Any]) -> None:
    """`extra_paths`: operations of plain Starlette routes, which FastAPI does not document."""

    def schema() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, routes=app.routes)
            doc["paths"] = {**extra_paths, **doc.get("paths", {})}
            app.openapi_schema = with_400(doc)
        return app.openapi_schema

    app.openapi = schema  # type: ignore[method-assign]


def with_400(doc: dict[str, Any]) -> dict[str, Any]:
    for operations in doc.get("paths", {}).values():
        for op in operations.values():
            responses = op.get("responses", {})
            if responses.pop("422", None) is not None or "requestBody" in op:
                responses["400"] = INVALID
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    schemas["ErrorEnvelope"] = ERROR_ENVELOPE
    return doc
