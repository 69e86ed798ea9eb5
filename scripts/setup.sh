#!/usr/bin/env bash
# Set up a development checkout: .venv with orch and its dev tools, and the pinned Claude Code and
# Gemini CLI in ~/.cache/orch (npm, no global install). Idempotent; safe to run again.
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

version=$(.venv/bin/python -c 'from orch.versions import CLAUDE_CODE_VERSION as v; print(v)')
package=$(.venv/bin/python -c 'from orch.versions import CLAUDE_CODE_PACKAGE as p; print(p)')
prefix="$HOME/.cache/orch/claude-code/$version"
if [ ! -x "$prefix/node_modules/.bin/claude" ]; then
  echo "setup: installing $package@$version into $prefix"
  mkdir -p "$prefix"
  npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error "$package@$version"
fi
"$prefix/node_modules/.bin/claude" --version >/dev/null

gemini_version=$(.venv/bin/python -c 'from orch.versions import GEMINI_CLI_VERSION as v; print(v)')
gemini_package=$(.venv/bin/python -c 'from orch.versions import GEMINI_CLI_PACKAGE as p; print(p)')
gemini_prefix="$HOME/.cache/orch/gemini-cli/$gemini_version"
if [ ! -x "$gemini_prefix/node_modules/.bin/gemini" ]; then
  echo "setup: installing $gemini_package@$gemini_version into $gemini_prefix"
  mkdir -p "$gemini_prefix"
  npm install --prefix "$gemini_prefix" --no-audit --no-fund --loglevel=error "$gemini_package@$gemini_version"
fi
"$gemini_prefix/node_modules/.bin/gemini" --version >/dev/null
