"""The session viewer's helpers, templates and stylesheet (pages in proxy/api/ui.py)."""
