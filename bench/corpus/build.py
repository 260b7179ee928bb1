"""Build the quality corpus: agent histories whose tool outputs come from real runs here.

Two sources. Coding trajectories: the small broken projects in sources/ are copied into a work
folder and really run (pytest, python, node, gcc, g++, rustc, git, grep, pip, file reads); an
agent's steps are laid out around those outputs, with fixes applied by real commands so the
second run's error is genuinely new. BFCL trajectories: multi-turn tasks from the `bfcl-eval`
package, replayed with its simulated tools (bfcl_replay.py, run in the venv that has it).

Each trajectory names its evidence: strings the next step needs (the latest exception line,
the failing tests, the file and values the fix depends on, the user's task).
Run `python -m bench.corpus.build` to (re)build and print a summary.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

CACHE = Path(os.environ.get("CTXPROXY_BENCH_CACHE", Path.home() / ".cache" / "ctxproxy-bench"))
SOURCES = Path(__file__).parent / "sources"
VERSION = 4  # bump when scenarios change, so a stale cached corpus is rebuilt
STDLIB = Path(sysconfig.get_paths()["stdlib"])
SYSTEM = (
    "You are a coding agent working in a terminal. Use the tools to inspect files and run "
    "commands; make minimal, correct changes; run the tests before you finish. Never guess "
    "file contents you have not read. Answer with a short summary of what you changed."
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run_command",
            "description": "Run a shell command in the workspace and return its output.",
            "parameters": {
                "type": "object",
                "properties": {"cmd": {"type": "string"}},
                "required": ["cmd"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Return a file's contents.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
]


@dataclass
class Trajectory:
    id: str
    kind: str
    messages: list[dict]
    evidence: list[dict] = field(default_factory=list)  # {"text", "kind"}
    tools: list[dict] | None = None

    def to_json(self) -> dict:
        return self.__dict__

    @classmethod
    def from_json(cls, data: dict) -> Trajectory:
        return cls(**data)


# --- real runs ------------------------------------------------------------------------------


class Workspace:
    """A fresh copy of sources/ where commands really run; outputs are captured verbatim."""

    def __init__(self, root: Path, memo: dict[str, str] | None = None):
        self.root = root
        self.memo = {} if memo is None else memo  # outputs that do not depend on the workspace
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(SOURCES, root)

    def run(self, cmd: str, cwd: str = ".", stable: bool = False) -> str:
        if stable and cmd in self.memo:
            return self.memo[cmd]
        env = {
            "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
            "HOME": os.environ.get("HOME", str(self.root)),
            "LANG": "C.UTF-8",
            "GIT_AUTHOR_DATE": "2026-11-30T10:00:00Z",
            "GIT_COMMITTER_DATE": "2026-11-30T10:00:00Z",
            "PYTHONDONTWRITEBYTECODE": "1",
            "NO_COLOR": "1",
        }
        proc = subprocess.run(
            cmd,
            shell=True,
            cwd=self.root / cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        out = (proc.stdout + proc.stderr).rstrip("\n")
        out = out if out else f"(no output, exit code {proc.returncode})"
        if stable:
            self.memo[cmd] = out
        return out


class Agent:
    """Lays out one trajectory: a user task, then assistant tool calls and their outputs."""

    def __init__(self, ws: Workspace, task: str):
        self.ws = ws
        self.messages: list[dict] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": task},
        ]
        self.evidence: list[dict] = []

    def step(
        self, thought: str, cmd: str, cwd: str = ".", tool: str = "run_command", stable=False
    ) -> str:
        out = self.ws.run(cmd, cwd, stable)
        if tool == "read_file":
            args = {"path": cmd.split()[-1]}
        else:
            args = {"cmd": cmd if cwd == "." else f"cd {cwd} && {cmd}"}
        cid = f"call_{len(self.messages):03d}"
        self.messages.append(
            {
                "role": "assistant",
                "content": thought,
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": tool, "arguments": json.dumps(args)},
                    }
                ],
            }
        )
        self.messages.append({"role": "tool", "tool_call_id": cid, "content": out})
        return out

    def read(self, path: str, thought: str = "") -> str:
        return self.step(thought or f"Reading {path}.", f"cat {path}", tool="read_file")

    def need(self, text: str, kind: str, output: str | None = None) -> None:
        if output is not None and text not in output:
            raise RuntimeError(f"evidence {text!r} not in the real output:\n{output[-2000:]}")
        self.evidence.append({"text": text, "kind": kind})


def noise_steps(ws: Workspace) -> list[tuple[str, str]]:
    """Real, stable outputs an agent reads while looking around: stdlib files, grep, git, pip."""
    lib = STDLIB
    reads = [
        "json/decoder.py",
        "json/encoder.py",
        "textwrap.py",
        "shlex.py",
        "fnmatch.py",
        "csv.py",
        "string.py",
        "dataclasses.py",
        "argparse.py",
        "logging/handlers.py",
        "configparser.py",
        "difflib.py",
    ]
    steps = [
        ("Let me look at how this is done in the standard library.", f"sed -n 1,220p {lib / r}")
        for r in reads
    ]
    steps += [
        ("Searching for similar definitions.", f"grep -rn 'def ' {lib / 'json'}"),
        ("Searching for error handling patterns.", f"grep -rn 'raise ValueError' {lib / 'email'}"),
        ("Which packages are installed?", f"{sys.executable} -m pip list"),
        ("Checking the test runner's metadata.", f"{sys.executable} -m pip show pytest pydantic"),
        ("Listing the library folder.", f"ls -la {lib / 'json'} {lib / 'email'}"),
        ("Looking for config files.", f"find {lib / 'email'} -name '*.py' | sort"),
        ("What does the history say?", "git log --stat"),
        ("Checking the working tree.", "git status && git diff --stat"),
        ("Looking at the environment's Python.", f"{sys.executable} -VV && uname -sm"),
    ]
    return steps


def grab(pattern: str, output: str) -> str:
    """The first match of pattern in a real output: line numbers come from the run itself."""
    found = re.search(pattern, output)
    if not found:
        raise RuntimeError(f"no {pattern!r} in the real output:\n{output[-2000:]}")
    return found.group(0)


def look_around(agent: Agent, rnd: random.Random, pool: list[tuple[str, str]], k: int) -> None:
    for thought, cmd in rnd.sample(pool, k):
        agent.step(thought, cmd, stable=not cmd.startswith("git"))


def init_git(ws: Workspace) -> None:
    ws.run(
        "git init -q -b main && git config user.email dev@example.com && "
        "git config user.name Dev && git add -A && git commit -q -m 'Import sources' && "
        "echo '# shop' > README.md && git add README.md && git commit -q -m 'Add readme'"
    )


# --- scenarios ------------------------------------------------------------------------------


def pytest_fix(ws: Workspace, rnd: random.Random, pool: list) -> Agent:
    task = (
        "The shop package's tests fail (shop/tests/test_pricing.py). Find the cause and fix the "
        "code without changing the tests."
    )
    a = Agent(ws, task)
    a.need("without changing the tests", "task")
    a.step("Let me see the layout.", "ls -R shop")
    look_around(a, rnd, pool, rnd.randint(1, 3))
    a.step("Running the tests.", "python -m pytest -q -rf tests", cwd="shop")
    a.read("shop/shop/pricing.py")
    config = a.read("shop/shop/config.py")
    look_around(a, rnd, pool, rnd.randint(3, 6))
    a.step(
        "The discount rate lives in config, not Settings. Fixing.",
        "sed -i 's/self.settings.discount_rate/config.DISCOUNT_RATE/' shop/shop/pricing.py",
    )
    a.step("Reviewing the change.", "git diff")
    second = a.step("Running the tests again.", "python -m pytest -q -rf tests", cwd="shop")
    look_around(a, rnd, pool, rnd.randint(3, 7))
    a.need("FAILED tests/test_pricing.py::test_parse_price[7.25 USD-7.25]", "failing test", second)
    a.need("ValueError: unsupported currency 'USD'", "exception", second)
    a.need(grab(r"shop/pricing\.py:\d+(?=: ValueError)", second), "path", second)
    a.need('CURRENCY = "EUR"', "value", config)
    return a


def python_crash(ws: Workspace, rnd: random.Random, pool: list) -> Agent:
    a = Agent(ws, "report.py crashes when I run it. Find out why and make it skip bad records.")
    a.need("make it skip bad records", "task")
    look_around(a, rnd, pool, rnd.randint(1, 3))
    out = a.step("Reproducing the crash.", "python report.py")
    look_around(a, rnd, pool, rnd.randint(2, 5))
    a.read("report.py")
    look_around(a, rnd, pool, rnd.randint(3, 6))
    a.need("TypeError: unsupported operand type(s) for /: 'int' and 'NoneType'", "exception", out)
    a.need(grab(r'report\.py", line \d+, in ratio', out), "path", out)
    a.need("FileNotFoundError: [Errno 2] No such file or directory", "exception", out)
    return a


def node_crash(ws: Workspace, rnd: random.Random, pool: list) -> Agent:
    a = Agent(ws, "`node server.js` dies at start-up. Fix the config handling.")
    a.need("Fix the config handling", "task")
    out = a.step("Starting the server.", "node server.js")
    look_around(a, rnd, pool, rnd.randint(2, 4))
    src = a.read("server.js")
    look_around(a, rnd, pool, rnd.randint(4, 8))
    a.need("TypeError: Cannot read properties of undefined (reading 'host')", "exception", out)
    a.need(grab(r"server\.js:\d+:\d+", out), "path", out)
    a.need('http: { host: "127.0.0.1", port: 8080 }', "value", src)
    return a


def c_build(ws: Workspace, rnd: random.Random, pool: list) -> Agent:
    a = Agent(ws, "ring.c does not build with -Wall -Werror. Make it build and keep the API.")
    a.need("keep the API", "task")
    a.step("Building.", "gcc -Wall -Werror -c ring.c -o ring.o")
    look_around(a, rnd, pool, rnd.randint(2, 4))
    a.read("ring.c")
    a.step("The field is called cap.", "sed -i 's/r->capacity/r->cap/' ring.c")
    out = a.step("Building again.", "gcc -Wall -Werror -c ring.c -o ring.o")
    look_around(a, rnd, pool, rnd.randint(4, 8))
    a.need(grab(r"ring\.c:\d+:\d+: error: passing argument 2 of", out), "exception", out)
    a.need("makes pointer from integer without a cast", "exception", out)
    return a


def cpp_build(ws: Workspace, rnd: random.Random, pool: list) -> Agent:
    a = Agent(ws, "index.cpp fails to compile with g++. Make Point usable as a map key.")
    a.need("Make Point usable as a map key", "task")
    look_around(a, rnd, pool, rnd.randint(1, 2))
    out = a.step("Compiling.", "g++ -std=c++17 -c index.cpp -o index.o")
    look_around(a, rnd, pool, rnd.randint(3, 6))
    a.read("index.cpp")
    look_around(a, rnd, pool, rnd.randint(2, 5))
    first = next(line for line in out.splitlines() if "error:" in line)
    a.need(first.strip(), "exception", out)
    a.need(grab(r"index\.cpp:\d+:\d+:   required from here", out), "path", out)
    return a


def rust_build(ws: Workspace, rnd: random.Random, pool: list) -> Agent:
    a = Agent(ws, "stack.rs does not compile. Fix it with the smallest change to main.")
    a.need("smallest change to main", "task")
    a.step("Compiling.", "rustc --edition 2021 stack.rs -o stack")
    look_around(a, rnd, pool, rnd.randint(2, 4))
    a.step("len() is usize.", "sed -i 's/let n: i32/let n: usize/' stack.rs")
    out = a.step("Compiling again.", "rustc --edition 2021 stack.rs -o stack")
    look_around(a, rnd, pool, rnd.randint(3, 7))
    a.read("stack.rs")
    a.need("error[E0502]: cannot borrow `words` as mutable", "exception", out)
    a.need(grab(r"--> stack\.rs:\d+:\d+", out), "path", out)
    return a


SCENARIOS = {
    "pytest": pytest_fix,
    "python": python_crash,
    "node": node_crash,
    "gcc": c_build,
    "g++": cpp_build,
    "rustc": rust_build,
}


def build_real(variants: int, kinds: list[str] | None = None, seed: int = 7) -> list[Trajectory]:
    out, memo = [], {}
    for name, scenario in SCENARIOS.items():
        if kinds is not None and name not in kinds:
            continue
        if name == "node" and not shutil.which("node"):
            continue
        if name == "rustc" and not shutil.which("rustc"):
            continue
        for v in range(variants):
            ws = Workspace(CACHE / "work", memo)
            init_git(ws)
            rnd = random.Random(f"{seed}-{name}-{v}")
            agent = scenario(ws, rnd, noise_steps(ws))
            out.append(Trajectory(f"{name}-{v}", name, agent.messages, agent.evidence, TOOLS))
    shutil.rmtree(CACHE / "work", ignore_errors=True)
    return out


# --- BFCL -----------------------------------------------------------------------------------


def bfcl_python() -> Path | None:
    """The interpreter of a venv with bfcl-eval (installed without its heavy deps), or None."""
    venv = CACHE / "venv-bfcl"
    py = venv / "bin" / "python"
    probe = [str(py), "-c", "import bfcl_eval, mpmath"]
    if py.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return py
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
        # --no-deps: its simulated tools need only mpmath; the full set pulls torch and vLLM.
        pip = [str(py), "-m", "pip", "install", "-q", "--no-deps", "bfcl-eval", "mpmath"]
        subprocess.run(pip, check=True, capture_output=True, timeout=600)
    except (subprocess.SubprocessError, OSError):
        return None
    return py if subprocess.run(probe, capture_output=True).returncode == 0 else None


def build_bfcl(count: int) -> list[Trajectory]:
    py = bfcl_python()
    if py is None or count <= 0:
        return []
    script = Path(__file__).parent / "bfcl_replay.py"
    proc = subprocess.run(
        [str(py), str(script), str(count)], capture_output=True, text=True, timeout=600
    )
    if proc.returncode != 0:
        print(f"bfcl replay failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
        return []
    return [Trajectory.from_json(t) for t in json.loads(proc.stdout)]


def load_corpus(
    variants: int = 4,
    bfcl: int = 12,
    rebuild: bool = False,
    kinds: list[str] | None = None,
    path: Path | None = None,
) -> list[Trajectory]:
    """The corpus, from the cache when it was built with the same settings."""
    which = "-".join(sorted(kinds)) if kinds else "all"
    path = path or CACHE / f"corpus-v{VERSION}-{which}-{variants}-{bfcl}.json"
    if path.exists() and not rebuild:
        return [Trajectory.from_json(t) for t in json.loads(path.read_text())]
    corpus = build_real(variants, kinds) + build_bfcl(bfcl)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([t.to_json() for t in corpus]))
    return corpus


if __name__ == "__main__":
    from proxy.compile.tokens import TokenCounter

    counter = TokenCounter()
    for t in load_corpus(rebuild=True):
        size = counter.count_messages(t.messages)
        print(f"{t.id:24} {len(t.messages):4} msgs {size:7} tok  {len(t.evidence)} evidence")
