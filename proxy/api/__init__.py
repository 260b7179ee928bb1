"""Thin HTTP handlers, one module per endpoint family."""
