"""The ctxproxy_recall tool: definition and search, rounds, the stream filter."""
