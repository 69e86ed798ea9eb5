#!/usr/bin/env bash
# Set up a checkout: check this machine first (python3 -m orch.prereqs, before anything is downloaded), then
# .venv with orch itself. Nothing else: `orch setup --agents ...` installs the agent CLIs a job needs
# (scripts/demo.sh: Claude Code), and scripts/test.sh the dev tools and every agent.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v python3 >/dev/null 2>&1 || { echo "setup: python3 is missing (apt-get install python3 python3-venv)" >&2; exit 2; }
# The standard library alone, from this tree: Python 3.11+ and venv, tmux, bubblewrap and user namespaces,
# git, npm (the agent CLIs). Each missing piece is one line with its fix.
if ! PYTHONPATH="$PWD" python3 -S -m orch.prereqs "$@"; then
  echo "setup: nothing was installed; fix the above, then run scripts/setup.sh again" >&2
  exit 2
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install --quiet --disable-pip-version-check -e .
echo "setup: $(.venv/bin/orch --version) in .venv (source .venv/bin/activate); agent CLIs: orch setup --agents claude,..."
