"""Scripted and real model servers, databases and histories for ctxproxy's tests and benchmarks;
nothing in the proxy imports it."""
