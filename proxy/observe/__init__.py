"""What operators see: Prometheus metrics and the access log."""
