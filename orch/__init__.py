"""orch: a containerised fleet runner for coding agents."""

__version__ = "0.1.0"
