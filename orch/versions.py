"""Pinned versions: one place, used by the image build, the test setup and `orch doctor`."""

from __future__ import annotations

CLAUDE_CODE_VERSION = "2.1.332"
CLAUDE_CODE_PACKAGE = "@anthropic-ai/claude-code"
GEMINI_CLI_VERSION = "0.61.0"
GEMINI_CLI_PACKAGE = "@google/gemini-cli"
TMUX_MIN_VERSION = (3, 2)
DEFAULT_BASE_IMAGE = "debian:bookworm-slim"
DEFAULT_IMAGE_TAG = "orch:latest"
