"""One exchange, in run order: identify, prepare, compile, forward, relay, record."""
