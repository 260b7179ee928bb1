"""Every size at which a request's work changes where or how it runs, in one table, with why.

Below a size the work is shorter than what doing it another way costs (a thread hop, a cache
look-up, a second buffer); past it the other way pays. Where work runs is the store's choice
(store/paths.py); the store reads the first three lines here like every other stage."""

from __future__ import annotations

# A request body up to this long is stored and compiled on the event loop (on PostgreSQL: its
# continuing turn's round trips awaited there): the work is shorter than a thread hop, which
# also makes the loop and the workers take turns at the GIL.
ON_LOOP_BYTES = 64 << 10
# An agent's next turn whose new part is up to ON_LOOP_BYTES opens on the loop too (SQLite), up
# to this long and this many messages: what was seen before is only hashed and compared there;
# past these the work on the known part alone would hold the loop too long.
ON_LOOP_AGENT_BYTES = 1 << 20
ON_LOOP_AGENT_MESSAGES = 500

# A body longer than this is parsed on a worker thread, so that the loop serves other requests.
PARSE_OFF_LOOP_BYTES = 1 << 20
# A history with more messages than this has its wire shape checked on a worker thread: up to
# it the checks are shorter than the hop.
PREPARE_OFF_LOOP_MESSAGES = 500

# A history of this many new messages or more is stored ahead of its request, a slice at a time
# in transactions of their own, so that no single write holds the write lock for long.
AHEAD_FROM = 1_000

# A history whose encoded bytes are this long or longer goes upstream as its own buffer beside
# the rest of the body: a shorter one is copied for less than an extra write costs.
PARTS_FROM = 128 << 10

# Memos of what a history held before (its tool pairing, its plain messages) are consulted from
# this many messages: a shorter history is scanned for less than the memo's look-up costs.
MEMO_FROM_MESSAGES = 64
# The same for a raw body's scan for long numbers, in bytes.
MEMO_FROM_BYTES = 64 << 10

# A request this large fills no cache: its millions of small objects, kept by a cache, would
# evict every session's entries and pin their heap's pages long after the request.
TRANSIENT_MESSAGES = 20_000
TRANSIENT_BYTES = 16 << 20
