"""Pinned versions: one place, used by the image build, the test setup and `orch doctor`."""

from __future__ import annotations

CLAUDE_CODE_VERSION = "2.1.332"
CLAUDE_CODE_PACKAGE = "@anthropic-ai/claude-code"
OPENCODE_VERSION = "1.18.33"
OPENCODE_PACKAGE = "opencode-ai"
OPENCODE_PLUGIN_PACKAGE = "@opencode-ai/plugin"
"""opencode installs this into every config dir it reads: orch installs it once, pinned, and links it."""
AIDER_VERSION = "0.86.2"
AIDER_PACKAGE = "aider-chat"
TMUX_MIN_VERSION = (3, 2)
DEFAULT_BASE_IMAGE = "debian:bookworm-slim"
DEFAULT_IMAGE_TAG = "orch:latest"
