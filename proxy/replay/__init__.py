"""Replay: sessions already on disk (stored, Claude Code, Codex, OpenAI-chat JSONL) compiled
turn by turn offline through the live compile path, under one configuration or two."""
