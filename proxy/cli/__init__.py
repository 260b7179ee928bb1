"""The `ctxproxy` command: parsing, serve and migrate, terminal tables, the start-up report."""
