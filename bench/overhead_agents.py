"""The overhead bench's agent profiles: Claude-Code-shaped sessions on /v1/messages and
Codex-shaped ones on /v1/responses, continuing, timed against the upstream reached directly.

Each block primes a session with `start` tool steps, then sends that history plus one new step
(a counter in its tool output, so no request repeats) back to back on one connection."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from bench import agents, loadgen, tabulate
from bench import overhead as o

AGENTS = ("claude", "codex")


@dataclasses.dataclass
class AgentLoad:
    agent: str
    start: int = 20  # tool steps already in the stored session

    def base(self) -> dict[str, Any]:
        make = agents.claude_session if self.agent == "claude" else agents.codex_session
        return make(f"s{next(o._COUNTER)}", self.start)

    def turn(self, base: dict[str, Any]) -> dict[str, Any]:
        body = agents.next_turn(self.agent, base, self.start)
        key = "messages" if self.agent == "claude" else "input"
        last = dict(body[key][-1])
        mark = o.MARK.decode()
        if self.agent == "claude":
            result = {**last["content"][0], "content": f"{mark}\n{last['content'][0]['content']}"}
            last["content"] = [result]
        else:
            last["output"] = f"{mark}\n{last['output']}"
        return {**body, key: [*body[key][:-1], last]}


def on_path(t: loadgen.Target, agent: str) -> loadgen.Target:
    return dataclasses.replace(t, path=agents.PATHS[agent])


async def block(t: loadgen.Target, load: AgentLoad, plan: o.Plan) -> list[float]:
    base = load.base()
    await o.prime(t, base)
    template = t.request(load.turn(base))
    got = await o.timed(t.server.port, lambda: o.variant(template), plan.latency_n, plan.latency_s)
    return [total for _, total in got]


async def rps(t: loadgen.Target, load: AgentLoad, clients: int, seconds: float) -> float:
    bases = [load.base() for _ in range(clients)]
    await asyncio.gather(*(o.prime(t, b) for b in bases))
    templates = [t.request(load.turn(b)) for b in bases]
    done = 0
    stop = asyncio.get_running_loop().time() + seconds

    async def client(template: bytes) -> None:
        nonlocal done
        conn = loadgen.Conn(t.server.port)
        try:
            while asyncio.get_running_loop().time() < stop:
                status, _, _, body = await conn.send(o.variant(template))
                if status != 200:
                    raise loadgen.BenchError(f"HTTP {status}: {body[:200]!r}")
                done += 1
        finally:
            await conn.close()

    started = asyncio.get_running_loop().time()
    await asyncio.gather(*(client(tp) for tp in templates))
    return done / (asyncio.get_running_loop().time() - started)


async def agent_latency(targets: list[loadgen.Target], plan: o.Plan, bar: Any) -> dict[str, Any]:
    """Per agent and target: p50 per round, added p50 paired with direct, rps at 16 clients
    for the ctxproxy targets."""
    out: dict[str, Any] = {}
    for agent in AGENTS:
        load = AgentLoad(agent, plan.agent_steps)
        live = [on_path(t, agent) for t in targets if not t.server.error]
        cells = {t.name: o.Cell(error=t.server.error) for t in targets}
        for t in live:  # warm-up
            try:
                warm = o.Plan(latency_n=plan.warmup, latency_s=plan.latency_s)
                await block(t, load, warm)
            except (loadgen.BenchError, OSError, asyncio.IncompleteReadError) as exc:
                cells[t.name].error = f"{type(exc).__name__}: {exc}"[:300]
        for r in range(plan.rounds):
            for t in live[r % len(live) :] + live[: r % len(live)]:
                cell = cells[t.name]
                bar.set_postfix_str(f"{agent} round {r + 1} {t.name}")
                if not cell.error:
                    try:
                        cell.plain.append(await block(t, load, plan))
                        if t.name.startswith("ctxproxy"):
                            cell.rps.append(await rps(t, load, plan.clients, plan.throughput_s))
                    except (loadgen.BenchError, OSError, asyncio.IncompleteReadError) as exc:
                        cell.error = f"{type(exc).__name__}: {exc}"[:300]
                bar.update(1)
        out[agent] = o.latency_figures({agent: {"continuing": cells}})[agent]["continuing"]
    return out


def render(figs: dict[str, Any], names: list[str]) -> str:
    header = ["agent", "figure", *names]
    rows = []
    for agent, by in figs.items():
        for label, key, added in (
            ("p50 ms", "p50_ms", False),
            ("added p50 ms", "added_p50_ms", True),
            ("requests/s, 16 clients", "rps16", False),
        ):
            cells = []
            for n in names:
                e = by.get(n, {})
                if "error" in e:
                    cells.append("n/a")
                elif n == "direct" and added:
                    cells.append("0")
                else:
                    cells.append(o._cell(e.get(key), added))
            rows.append([f"{agent} ({agents.PATHS[agent]})", label, *cells])
    errors = [f"{n}: {e['error']}" for by in figs.values() for n, e in by.items() if "error" in e]
    return tabulate.table(header, rows, left=2) + ("\n" + "\n".join(errors) if errors else "")


def create_database(admin: str) -> tuple[str, Any]:
    """(URL of a fresh database beside `admin`'s, a function that drops it)."""
    import uuid

    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(admin)
    name = f"ctxproxy_bench_{uuid.uuid4().hex[:8]}"
    dsn = f"host={url.host} port={url.port or 5432} user={url.username} dbname={url.database}"
    with psycopg.connect(dsn, autocommit=True, connect_timeout=3) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return url.set(database=name).render_as_string(hide_password=False), drop
