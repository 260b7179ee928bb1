"""Histories for bench/keep_vs_trim.py, laid out deterministically from a seed (no downloads).

Each case is a history whose last message asks for the next step and the probes that step
needs: strings that must be in the view sent upstream for the answer (or the next call) to be
right. `statements`: a few hundred short user statements with plain acknowledgements. Tool
trajectories: a listing larger than the room, a 4k-token result in a 2k room, values that only
earlier outputs hold, and `bfcl`: BFCL's multi-turn long-context tasks replayed with its own
simulated tools (bench/corpus), whose probes are the next calls' argument values that only
earlier outputs revealed; built once into the bench cache (bfcl-eval in a venv of its own).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from bench.corpus import build
from bench.longchat import long_chat
from bench.planted import misleading_session, planted_session

SYSTEM = "You are a helpful assistant. Use the tools when you need data."
ACKS = ["Noted.", "Got it.", "Thanks, I'll remember that.", "Understood.", "OK."]
SUBJECTS = [
    ("my gym locker code", lambda r: f"{r.randint(1000, 9999)}"),
    ("the dentist appointment", lambda r: f"March {r.randint(2, 28)} at {r.randint(8, 17)}:30"),
    ("my sister's flight number", lambda r: f"LH{r.randint(100, 999)}"),
    ("the budget for the kitchen", lambda r: f"${r.randint(2, 40)},{r.randint(100, 999)}"),
    ("my preferred seat", lambda r: f"row {r.randint(3, 40)}{r.choice('ACDF')}"),
    ("the wifi password at the cabin", lambda r: f"pine-{r.randint(100, 999)}-lake"),
    ("our anniversary dinner", lambda r: f"table {r.randint(2, 30)} at Rosa's"),
    ("the bike lock combination", lambda r: f"{r.randint(100, 999)}-{r.randint(10, 99)}"),
    ("my daughter's shoe size", lambda r: f"EU {r.randint(24, 38)}"),
    ("the plumber's quote", lambda r: f"{r.randint(150, 900)} euros"),
]
FORMS = [
    "Please remember that {s} is {v}.",
    "Just so you know, {s} is {v}.",
    "I decided that {s} will be {v}.",
    "For the record: {s} is {v}.",
    "I'd prefer {s} to be {v}, and that is final.",
]


@dataclass
class Case:
    shape: str
    id: str
    messages: list[dict]
    probes: list[str]


def statements(seed: int, n: int = 300) -> Case:
    """(a) n short user statements, each acknowledged, then a question about one of them."""
    rng = random.Random(seed)
    msgs = [
        {"role": "system", "content": "You are a personal assistant with a good memory."},
        {"role": "user", "content": "I'll tell you things over the next while; keep track."},
        {"role": "assistant", "content": "Happy to. Go ahead."},
    ]
    probes = []
    for i in range(n):
        subject, value = SUBJECTS[i % len(SUBJECTS)]
        v = f"{value(rng)} (#{i})"
        said = rng.choice(FORMS).format(s=f"{subject} number {i}", v=v)
        msgs += [
            {"role": "user", "content": said},
            {"role": "assistant", "content": rng.choice(ACKS)},
        ]
        probes.append(v)
    ask = rng.randrange(n)
    question = f"What did I tell you about {SUBJECTS[ask % len(SUBJECTS)][0]} number {ask}?"
    return Case(
        "statements", f"statements-{seed}", [*msgs, {"role": "user", "content": question}], probes
    )


def chat_facts(seed: int) -> Case:
    """(a) bench/longchat.py's conversation (LongMemEval-like): facts among chit-chat and
    questions, long replies, some facts updated; a question about one fact, its newest value
    the probe."""
    msgs, probes, _ = long_chat(seed)
    return Case("long chat", f"long-chat-{seed}", msgs, probes)


def _call(cid: str, name: str, args: dict) -> dict:
    fn = {"name": name, "arguments": json.dumps(args)}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": cid, "type": "function", "function": fn}],
    }


def _result(cid: str, content: str) -> dict:
    return {"role": "tool", "tool_call_id": cid, "content": content}


def listing(seed: int, items: int = 400) -> Case:
    """(b) a listing larger than the room; the next call needs the id and price of the item
    the user named (at the head, the tail or the middle of the listing)."""
    rng = random.Random(seed)
    rows = [
        {"id": f"SKU-{rng.randint(100000, 999999)}",
         "name": f"{rng.choice(COLORS)} {rng.choice(GOODS)} {k}",
         "price": f"{rng.randint(5, 400)}.{rng.randint(10, 99)}", "stock": rng.randint(0, 80)}
        for k in range(items)
    ]  # fmt: skip
    at = [rng.randrange(5), items - 1 - rng.randrange(5), rng.randrange(items // 4, 3 * items // 4)]
    pick = rows[at[seed % 3]]
    msgs = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Find the {pick['name']} in the catalogue and order two."},
        _call("c1", "list_catalogue", {"category": "all"}),
        _result("c1", json.dumps(rows, indent=1)),
    ]
    return Case("listing", f"listing-{seed}", msgs, [pick["id"], pick["price"]])


def big_result(seed: int) -> Case:
    """(b) a ~4k-token result (a route with its legs); the next call needs its total distance
    and the booking reference at its head."""
    rng = random.Random(seed)
    ref = f"RT-{rng.randint(10000, 99999)}"
    total = f"{rng.randint(300, 2000)}.{rng.randint(1, 9)} km"
    legs = [
        {"leg": k, "from": f"Town {k}", "to": f"Town {k + 1}", "km": rng.randint(5, 90),
         "notes": "Toll road; rest area after the bridge; fuel available at the junction."}
        for k in range(90)
    ]  # fmt: skip
    route = {"reference": ref, "total_distance": total, "legs": legs, "status": "ok"}
    msgs = [
        {"role": "system", "content": SYSTEM},
        {
            "role": "user",
            "content": "Plan the drive to the coast and book the car for that distance.",
        },
        _call("c1", "plan_route", {"to": "coast"}),
        _result("c1", json.dumps(route, indent=1)),
    ]
    return Case("big result", f"big-{seed}", msgs, [ref, total])


def earlier_values(seed: int, steps: int = 14) -> Case:
    """(b) a trajectory of middle-sized outputs; the next call needs values from two earlier
    outputs (a flight id from the search, a price from the details)."""
    rng = random.Random(seed)
    msgs: list[dict] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Book me the cheapest morning flight to Lisbon next Friday."},
    ]
    probes = []
    for k in range(steps):
        cid = f"c{k}"
        flights = [
            {"flight": f"TP{rng.randint(1000, 9999)}",
             "departs": f"0{rng.randint(6, 9)}:{rng.randint(10, 59)}",
             "price_eur": rng.randint(80, 600), "seats": rng.randint(0, 9)}
            for _ in range(25)
        ]  # fmt: skip
        msgs += [_call(cid, "search_flights", {"page": k}), _result(cid, json.dumps(flights))]
        if k in (steps // 3, steps // 2):
            best = min(flights, key=lambda f: f["price_eur"])
            probes += [best["flight"]]
    msgs.append({"role": "assistant", "content": "I have the search results; booking now."})
    msgs.append({"role": "user", "content": "Go ahead with the one you found cheapest."})
    return Case("earlier values", f"earlier-{seed}", msgs, probes)


def planted(seed: int, agentic: bool) -> Case:
    """(c) bench/planted.py's sessions: 20 statements planted at random turns."""
    p = planted_session(seed, agentic=agentic)
    return Case("planted agentic" if agentic else "planted chat", p.id, p.messages, p.probes)


def misleading(seed: int) -> Case:
    """(c) bench/planted.py's agent session whose newest evidence sits among misleading words."""
    msgs, probes = misleading_session(seed)
    return Case("misleading", f"misleading-{seed}", msgs, probes)


BFCL_COUNT = 24  # asks for more than there are: every long-context task long enough (14)


def bfcl(path: Path | None = None) -> list[Case]:
    """BFCL trajectories, from the cache when built; no network once it is there."""
    path = path or build.CACHE / f"bfcl-shape-v1-{BFCL_COUNT}.json"
    if not path.exists():
        trajectories = [t.to_json() for t in build.build_bfcl(BFCL_COUNT)]
        if not trajectories:
            raise RuntimeError("bfcl-eval could not be installed or replayed; see stderr")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(trajectories))
    out = []
    for t in json.loads(path.read_text()):
        values = [e["text"] for e in t["evidence"] if e["kind"] == "value"]
        out.append(Case("bfcl", t["id"], t["messages"], values))
    return out


COLORS = ["red", "blue", "green", "black", "white", "steel", "copper", "yellow"]
GOODS = ["kettle", "toaster", "lamp", "chair", "blender", "mug", "pan", "clock", "fan"]


def cases(seeds: int, shapes: list[str]) -> list[Case]:
    makers = {
        "statements": lambda s: statements(s),
        "long chat": chat_facts,
        "listing": listing,
        "big result": big_result,
        "earlier values": earlier_values,
        "planted chat": lambda s: planted(s, False),
        "planted agentic": lambda s: planted(s, True),
        "misleading": misleading,
    }
    # bfcl's tasks are published data, not seeded: all of them once, whatever the seeds
    return [
        case
        for shape in shapes
        for case in (bfcl() if shape == "bfcl" else [makers[shape](s) for s in range(seeds)])
    ]
