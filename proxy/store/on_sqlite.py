"""SQLite's turns: short work on the event loop, the rest on a thread. Its writes wait for no
network, only for this process's write lock (engine.Writer); work on the loop that would wait
for it raises WouldWait before it changed anything and runs again on a thread (offload.run)."""

from __future__ import annotations

from proxy.store.paths import Path, Turn, Turns

# A small request: every step on the loop, where it is shorter than a thread hop.
LOOP = Path("sqlite-loop", on_loop=True, answer_on_loop=True)
# An agent's next turn (long, little of it new): opened on the loop; its answer's record stays on
# a thread, where it overlaps the client's next request instead of delaying it.
AGENT = Path("sqlite-loop-open", on_loop=True, answer_on_loop=False)
# Any other: on a thread, the request's record while the view goes upstream.
THREAD = Path("sqlite-thread", on_loop=False, answer_on_loop=False)


class SqliteTurns(Turns):
    def path(self, turn: Turn) -> Path:
        if turn.small:
            return LOOP
        return AGENT if turn.agent_next else THREAD
