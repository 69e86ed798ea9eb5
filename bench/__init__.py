"""Benchmarks for orch: what a fleet runner costs, measured with real Claude Code workers.

Run `python -m bench` (see bench/README.md). Benchmarks measure; they never fail a build.
"""
