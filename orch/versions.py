"""Pinned versions: one place, used by the image build, the test setup and `orch doctor`."""

from __future__ import annotations

DEFAULT_AGENT = "claude"
"""The agent of a run that names none (`orch up`, a fleet spec, compose's ORCH_AGENT): orch.agents.registry."""

CLAUDE_CODE_VERSION = "2.1.332"
CLAUDE_CODE_PACKAGE = "@anthropic-ai/claude-code"
CODEX_VERSION = "0.171.0"
CODEX_PACKAGE = "@openai/codex"
OPENCODE_VERSION = "1.18.33"
OPENCODE_PACKAGE = "opencode-ai"
OPENCODE_PLUGIN_PACKAGE = "@opencode-ai/plugin"
"""opencode installs this into every config dir it reads: orch installs it once, pinned, and links it."""
AIDER_VERSION = "0.86.2"
AIDER_PACKAGE = "aider-chat"
GEMINI_CLI_VERSION = "0.61.0"
GEMINI_CLI_PACKAGE = "@google/gemini-cli"
TMUX_MIN_VERSION = (3, 2)
DEFAULT_BASE_IMAGE = "debian:bookworm-slim"
DEFAULT_IMAGE_TAG = "orch:latest"
NODE_VERSION = "22.23.5"
"""The Node.js runtime the worker image carries when an agent needs one (Gemini CLI asks for >= 20; Debian
bookworm has 18): the npm registry's `node-linux-<arch>` package, so no other download is needed."""
