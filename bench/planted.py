"""Sessions with statements planted in them, and the misleading-keyword agent session.

Planted sessions: ~130 turns (chat-only or agentic) with 20 statements a later step depends
on (safety rules, constraints, facts, goals, preferences; some updated later). A statement is
kept when its newest value is in the view. The misleading session ends with a failing pytest
run, a Python crash, then a grep whose hits hold `ERROR`; its probes are the newest failing
tests, their `E` line, the exception line and the failing frame.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from proxy.testing.histories import PYTEST_REPORT

SYSTEM = "You are a careful senior engineer helping on a billing service."
TASK = "We are building the invoicing part of our billing service in Python. Help me along."
RULE_AFTER_TASK = "Never run database migrations against the production cluster."

# (statement, probe that must be in the view, probe of the value it replaces or None)
PLANTED: list[tuple[str, str]] = [
    (RULE_AFTER_TASK, "Never run database migrations against the production cluster"),
    ("The staging database port is 5433.", "5433"),
    ("Do not commit anything to the release-2024 branch.", "release-2024"),
    ("Our goal is to send the first invoices to customers by March 14.", "March 14"),
    ("I prefer type hints on every function and no bare except clauses.", "no bare except"),
    ("The invoice numbers must be at most 12 characters long.", "at most 12 characters"),
    ("The payments API key lives in the env var PAY_API_KEY_V2.", "PAY_API_KEY_V2"),
    ("Always round money with ROUND_HALF_EVEN, never with floats.", "ROUND_HALF_EVEN"),
    ("The service account is billing-svc@corp.example.", "billing-svc@corp.example"),
    ("Keep every module under 300 lines.", "under 300 lines"),
    ("The currency for all EU customers is EUR and tax_rate = 0.19.", "tax_rate = 0.19"),
    ("Never email customers from a test run; use the sandbox mailbox qa-sink.", "qa-sink"),
    ("We decided to use PostgreSQL 16 with the pgcrypto extension.", "pgcrypto"),
    ("The deploy window is Tuesdays 06:00-08:00 UTC.", "Tuesdays 06:00-08:00"),
    ("I'd like commit messages in the imperative mood, under 72 characters.", "imperative mood"),
    ("Do not add any new third-party dependency without asking me first.", "new third-party"),
    ("The retry limit for the payment gateway is 4 attempts.", "4 attempts"),
]
# Later updates: (statement, newest probe); each replaces one planted fact.
UPDATES: list[tuple[str, str]] = [
    ("Update: the staging database port is now 6432.", "6432"),
    ("The retry limit for the payment gateway is now 6 attempts.", "6 attempts"),
    ("Change of plan: the deploy window is now Thursdays 05:00-07:00 UTC.", "Thursdays 05:00"),
]
# Replaced probes are not scored; the updates' probes are, so 20 statements in all.
REPLACED = {"5433", "4 attempts", "Tuesdays 06:00-08:00"}

QUESTIONS = [
    "How should the invoice line items be modelled?",
    "Can you explain how we should paginate the invoice listing endpoint?",
    "What is a good way to test the PDF rendering?",
    "Walk me through idempotency keys for the payment calls.",
    "How would you structure the tax calculation module?",
    "What should the error responses of the API look like?",
    "How do we handle partial refunds cleanly?",
    "Could you sketch the schema for credit notes?",
]
PROSE = (
    "Here is one way to approach it. Start from the data you already have and keep the "
    "boundaries between modules explicit, so each part can be tested on its own. "
    "Validate inputs where they enter the system, keep the core logic pure, and push side "
    "effects such as database writes and HTTP calls to the edges. "
)


@dataclass
class Planted:
    id: str
    messages: list[dict]
    probes: list[str]  # the newest value of each planted statement
    rule_probe: str  # the rule given right after the task


def _answer(rng: random.Random) -> str:
    return PROSE * rng.randint(2, 4) + f"(point {rng.randint(1, 999)})"


def _positions(rng: random.Random, turns: int) -> list[int]:
    """Turns at which the statements after the first are planted, then the updates."""
    spots = sorted(rng.sample(range(2, turns - 2), len(PLANTED) - 1 + len(UPDATES)))
    return spots


def planted_session(seed: int, *, agentic: bool, turns: int = 65) -> Planted:
    """`turns` user turns (about twice as many messages in chat; more with tool steps)."""
    rng = random.Random(seed)
    msgs: list[dict] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    msgs.append({"role": "assistant", "content": "Sure. " + _answer(rng)})
    msgs.append({"role": "user", "content": RULE_AFTER_TASK})
    msgs.append({"role": "assistant", "content": "Understood, I will keep to that."})
    spots = _positions(rng, turns)
    plan = {t: s for t, s in zip(spots, [*PLANTED[1:], *UPDATES], strict=True)}
    for turn in range(1, turns):
        said = plan.get(turn, (None, None))[0]
        question = rng.choice(QUESTIONS)
        msgs.append({"role": "user", "content": f"{said} {question}" if said else question})
        if agentic:
            msgs += _tool_steps(rng, turn)
        msgs.append({"role": "assistant", "content": _answer(rng)})
    msgs.append({"role": "user", "content": "Summarise what we agreed so far, please."})
    probes = [p for _, p in PLANTED if p not in REPLACED] + [p for _, p in UPDATES]
    kind = "agentic" if agentic else "chat"
    return Planted(f"{kind}-{seed}", msgs, probes, PLANTED[0][1])


def _tool_steps(rng: random.Random, turn: int) -> list[dict]:
    out = []
    for k in range(rng.randint(1, 2)):
        cid = f"call_{turn}_{k}"
        path = rng.choice(["billing/invoice.py", "billing/tax.py", "tests/test_invoice.py"])
        cmd = rng.choice([f"sed -n 1,80p {path}", "python -m pytest -q tests", f"cat {path}"])
        out.append(_call(cid, cmd, rng.choice(["", "Let me look."])))
        body = "\n".join(f"    line {i}: value = compute(item_{i}, rate)" for i in range(30))
        out.append({"role": "tool", "tool_call_id": cid, "content": body})
    return out


def _call(cid: str, cmd: str, text: str) -> dict:
    args = json.dumps({"command": cmd})
    return {
        "role": "assistant",
        "content": text or None,
        "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": "bash", "arguments": args}}
        ],
    }


# --- the misleading-keyword agent session --------------------------------------------------


CRASH = """Loading 214 pending invoices from staging
Traceback (most recent call last):
  File "/work/billing/scripts/issue_invoices.py", line 63, in <module>
    main()
  File "/work/billing/scripts/issue_invoices.py", line 58, in main
    issue(batch, rates=load_rates())
  File "/work/billing/billing/issue.py", line 112, in issue
    line.tax = apply_rate(line, rates)
  File "/work/billing/billing/tax.py", line 88, in apply_rate
    return line.net * rates[line.region]
KeyError: 'DE-BY'"""

LOGGING_GREP = "\n".join(
    f"/usr/lib/python3.11/logging/__init__.py:{n}:{text}"
    for n, text in [
        (97, "CRITICAL = 50"), (98, "FATAL = CRITICAL"), (99, "ERROR = 40"),
        (107, "    ERROR: 'ERROR',"), (116, "    'ERROR': ERROR,"),
        (1508, "    def error(self, msg, *args, **kwargs):"),
        (1510, "        Log 'msg % args' with severity 'ERROR'."),
        (1517, "        if self.isEnabledFor(ERROR):"),
        (1518, "            self._log(ERROR, msg, args, **kwargs)"),
        (2131, "def error(msg, *args, **kwargs):"),
        (2133, "    Log a message with severity 'ERROR' on the root logger. If the logger has"),
        (2138, "    root.error(msg, *args, **kwargs)"),
        (2141, "    Log a message with severity 'ERROR' on the root logger, with exception"),
    ]
)  # fmt: skip
MISLEADING_PROBES = [
    "FAILED tests/test_invoice.py::test_parse_amount_locale",
    "FAILED tests/test_tax.py::test_vat_reverse_charge",
    "FAILED tests/test_tax.py::test_vat_rounding_half_even",
    "E   decimal.InvalidOperation: [<class 'decimal.ConversionSyntax'>]",
    "KeyError: 'DE-BY'",
    'File "/work/billing/billing/tax.py", line 88, in apply_rate',
]
_READS = [
    ("cat ci/previous_run.log", "2024-03-01 10:02:11 ERROR worker-3 lost connection\n"
     "FAILED tests/test_old.py::test_legacy_export - AssertionError\n"
     "Traceback (most recent call last):\n  File \"old.py\", line 3, in <module>\n"
     "ValueError: stale fixture\n"),
    ("grep -rn FAILED docs/", "docs/testing.md:12:A run that prints FAILED lists the test ids."
     "\ndocs/testing.md:40:ERROR means the fixture itself broke, not the test."),
    ("sed -n 1,60p billing/logging_setup.py", "\n".join(
        f"logger.setLevel(logging.ERROR)  # line {i}" if i % 7 == 0 else f"x{i} = {i}"
        for i in range(60))),
]  # fmt: skip


def misleading_session(seed: int, turns: int = 150) -> tuple[list[dict], list[str]]:
    """An agent session of `turns` tool steps whose last three are a failing pytest run, a
    Python crash and a grep over logging's source; the probes its last view must hold."""
    rng = random.Random(seed)
    msgs: list[dict] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Make the invoicing tests pass and issue the March batch."},
    ]
    for n in range(turns - 3):
        cmd, out = rng.choice(_READS) if n % 3 else ("python -m pytest -q", _passing(rng))
        msgs += _step(n, cmd, out, rng)
    # Sized so that the last three steps alone pass a 4k window: -v lines before the report,
    # progress lines before the crash, and a grep over logging's whole package.
    passed = "\n".join(f"tests/test_totals.py::test_total_{i} PASSED" for i in range(120))
    report = f"{passed}\n{PYTEST_REPORT}\nexit code: 1"
    msgs += _step(turns - 3, "python -m pytest -v tests", report, rng)
    progress = "\n".join(f"INFO issued invoice INV-{1000 + i} for customer {i}" for i in range(90))
    crash = f"{progress}\n{CRASH}\nexit code: 1"
    msgs += _step(turns - 2, "python scripts/issue_invoices.py", crash, rng)
    grep = 'grep -rn "ERROR" /usr/lib/python3.11/logging/'
    msgs += _step(turns - 1, grep, "\n".join([LOGGING_GREP] * 8), rng)
    return msgs, MISLEADING_PROBES


def _passing(rng: random.Random) -> str:
    dots = "." * rng.randint(30, 48)
    return f"{dots}\n{len(dots)} passed in {rng.randint(1, 3)}.{rng.randint(10, 99)}s"


def _step(n: int, cmd: str, out: str, rng: random.Random) -> list[dict]:
    cid = f"call_{n}"
    said = rng.choice(["", "Checking.", "Next I will look at this."])
    return [_call(cid, cmd, said), {"role": "tool", "tool_call_id": cid, "content": out}]
