#!/usr/bin/env bash
# Set up a development checkout: .venv with orch and its dev tools, and every pinned agent CLI (each
# agent's facts say what: orch/agents/installs.py) in ~/.cache/orch (npm and a venv, no global install).
set -euo pipefail
cd "$(dirname "$0")/.."

need() { command -v "$1" >/dev/null 2>&1 || { echo "setup: $1 is missing: $2" >&2; exit 2; }; }
need python3 "apt-get install python3 python3-venv"
need tmux "apt-get install tmux"
need npm "apt-get install npm (Node 20+)"

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install --quiet --upgrade pip
.venv/bin/pip install --quiet -e '.[dev]'

PYTHON=.venv/bin/python scripts/install-agents.sh all
