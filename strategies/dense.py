"""dense: a tool output that is a JSON array of records, rendered as a table that keeps every
value: the field names once, then one row per record, with a note and the original's ref.

The usual tool output (a search, a listing, a page of results) repeats each field name and
its quotes in every record; the values the next call needs (an id, a price) are a small part
of its tokens. As a table the same values take a third to a half of the room, so a view can
keep several times more of them whole than a truncation to a head would. Lossless by
construction (a value that would be ambiguous in a row is written as JSON), and a pure
function of the raw message, so the same output gives the same bytes on every turn.
"""

from __future__ import annotations

import json
from typing import Any

from strategies.compact import compact_until
from strategies.context import Context, StrategyResult
from strategies.fit import parsed
from strategies.memo import text_cache
from strategies.messages import Message, old_indexes, recall_ref, text_of, tool_names, with_content
from strategies.registry import register

LABEL = "dense"
MIN_ROWS = 4  # fewer records gain little over their JSON
SEP = ","
MIN_GAIN = 0.8  # the table must be at most this share of the original's characters


@register("dense")
def dense(messages: list[Message], ctx: Context) -> StrategyResult:
    """Old outputs that are arrays of records rendered as tables, oldest first, to the target."""
    names = tool_names(messages)
    return compact_until(
        messages,
        ctx,
        old_indexes(messages, ctx.keep_recent(), ("tool",)),
        lambda cur, raw: dense_output(raw, names.get(raw.get("tool_call_id", ""), "?")),
        strategy=LABEL,
        reason="old tool outputs of JSON records rendered as tables (every value kept)",
    )


def dense_output(msg: Message, name: str) -> Message | None:
    """The tool message with its records as a table, or None when it holds none or the table
    would not be much smaller."""
    text = text_of(msg)
    if msg.get("role") != "tool" or text is None:
        return None
    table = _table_text(text)
    if table is None:
        return None
    body, gaps = table
    gap = "; empty: no such field" if gaps else ""
    header = f"[Output of tool '{name}' as a table, every value kept{gap}; {recall_ref(msg)}]"
    dense_text = f"{header}\n{body}"
    return with_content(msg, dense_text) if len(dense_text) <= MIN_GAIN * len(text) else None


@text_cache()
def _table_text(text: str) -> tuple[str, bool] | None:
    """The output's JSON as tables (a top-level array of records, or an object whose fields
    hold such arrays, its other fields kept as compact JSON) and whether a record lacks a
    field; None when there is no table."""
    value = parsed(text)
    if isinstance(value, list):
        return _table(value)
    if not isinstance(value, dict):
        return None
    parts, tables, gaps = [], 0, False
    for key, field in value.items():
        table = _table(field) if isinstance(field, list) else None
        if table is not None:
            tables, gaps = tables + 1, gaps or table[1]
            parts.append(f"{_json(key)} ({len(field)} rows):\n{table[0]}")
        else:
            parts.append(f"{_json(key)}: {_json(field)}")
    return ("\n".join(parts), gaps) if tables else None


def _table(items: list[Any]) -> tuple[str, bool] | None:
    """Field names once, then a row per record; and whether a record lacks a field."""
    if len(items) < MIN_ROWS or not all(isinstance(r, dict) and r for r in items):
        return None
    fields: dict[str, None] = {}
    for record in items:
        fields.update(dict.fromkeys(record))
    if len(fields) > 2 * max(len(r) for r in items):
        return None  # records that share few fields are not a table
    rows = [SEP.join(_cell(r[f]) if f in r else "" for f in fields) for r in items]
    gaps = any(len(r) < len(fields) for r in items)
    return "\n".join([SEP.join(_cell(f) for f in fields), *rows]), gaps


def _cell(value: Any) -> str:
    """A value as a row shows it: plain when that cannot be misread, else as JSON."""
    if isinstance(value, str):
        plain = value and value == value.strip() and SEP not in value and "\n" not in value
        return value if plain and not _looks_typed(value) else _json(value)
    return _json(value)


def _looks_typed(value: str) -> bool:
    """A string a reader would take for a number, a boolean, null or JSON: quoted in a row."""
    if value in ("true", "false", "null") or value[:1] in '[{"':
        return True
    try:
        float(value)
    except ValueError:
        return False
    return True


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
