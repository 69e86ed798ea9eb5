#!/usr/bin/env bash
# The project's one test command: set up, lint, type-check, then run the whole suite against a real
# tmux, the real Claude Code binary, and (when an engine answers) a real Docker engine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

if .venv/bin/python -c 'import sys; from orch.container.engine import docker_client; docker_client()' 2>/dev/null; then
  # The image build is cached by Docker; ORCH_BASE_IMAGE / ORCH_CA_BUNDLE pick the base and a CA bundle.
  .venv/bin/python -m orch.container.image --if-stale
fi

.venv/bin/ruff check orch tests bench
.venv/bin/ruff format --check orch tests bench
.venv/bin/mypy
exec .venv/bin/pytest "$@"
