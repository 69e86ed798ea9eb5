#!/usr/bin/env bash
# Set up a development checkout: .venv with orch and its dev tools, and the pinned agent CLIs (Claude Code,
# Codex, Gemini CLI, opencode, aider) in ~/.cache/orch (npm and a venv, no global install). Idempotent.
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

# Codex CLI: its native binary comes in a per-platform optional dependency (never --omit=optional).
codex_version=$(.venv/bin/python -c 'from orch.versions import CODEX_VERSION as v; print(v)')
codex_package=$(.venv/bin/python -c 'from orch.versions import CODEX_PACKAGE as p; print(p)')
codex_prefix="$HOME/.cache/orch/codex/$codex_version"
if [ ! -x "$codex_prefix/node_modules/.bin/codex" ]; then
  echo "setup: installing $codex_package@$codex_version into $codex_prefix"
  mkdir -p "$codex_prefix"
  npm install --prefix "$codex_prefix" --no-audit --no-fund --loglevel=error "$codex_package@$codex_version"
fi
"$codex_prefix/node_modules/.bin/codex" --version >/dev/null

# opencode, pinned, and the plugin package it would otherwise install from npm into each worker's
# config dir at every start (orch links this copy instead: orch/agents/opencode.py).
pin() { .venv/bin/python -c "import orch.versions as v; print(v.$1)"; }
version=$(pin OPENCODE_VERSION)
prefix="$HOME/.cache/orch/opencode/$version"
if [ ! -x "$prefix/node_modules/.bin/opencode" ]; then
  echo "setup: installing $(pin OPENCODE_PACKAGE)@$version into $prefix"
  mkdir -p "$prefix"
  npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error "$(pin OPENCODE_PACKAGE)@$version"
fi
if [ ! -d "$prefix/config-deps/node_modules/@opencode-ai/plugin" ]; then
  mkdir -p "$prefix/config-deps"
  printf '{\n  "dependencies": {\n    "%s": "%s"\n  }\n}\n' "$(pin OPENCODE_PLUGIN_PACKAGE)" "$version" \
    > "$prefix/config-deps/package.json"
  npm install --prefix "$prefix/config-deps" --no-audit --no-fund --loglevel=error
fi
"$prefix/node_modules/.bin/opencode" --version >/dev/null

# aider, pinned, in its own venv (it pins its own dependencies, which must not meet orch's).
version=$(pin AIDER_VERSION)
prefix="$HOME/.cache/orch/aider/$version"
if [ ! -x "$prefix/bin/aider" ]; then
  echo "setup: installing $(pin AIDER_PACKAGE)==$version into $prefix"
  python3 -m venv "$prefix"
  "$prefix/bin/pip" install --quiet "$(pin AIDER_PACKAGE)==$version"
fi

# Gemini CLI, pinned.
gemini_version=$(.venv/bin/python -c 'from orch.versions import GEMINI_CLI_VERSION as v; print(v)')
gemini_package=$(.venv/bin/python -c 'from orch.versions import GEMINI_CLI_PACKAGE as p; print(p)')
gemini_prefix="$HOME/.cache/orch/gemini-cli/$gemini_version"
if [ ! -x "$gemini_prefix/node_modules/.bin/gemini" ]; then
  echo "setup: installing $gemini_package@$gemini_version into $gemini_prefix"
  mkdir -p "$gemini_prefix"
  npm install --prefix "$gemini_prefix" --no-audit --no-fund --loglevel=error "$gemini_package@$gemini_version"
fi
"$gemini_prefix/node_modules/.bin/gemini" --version >/dev/null
