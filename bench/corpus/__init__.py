"""Agent trajectories for bench/quality.py, built from real tool runs on this machine."""

from bench.corpus.build import Trajectory, load_corpus

__all__ = ["Trajectory", "load_corpus"]
