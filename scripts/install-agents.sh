#!/usr/bin/env bash
# Install pinned agent CLIs into ~/.cache/orch (npm prefixes and a venv; no global install), where orch
# finds them. Idempotent: an agent already there is left alone. Used by scripts/setup.sh (all of them)
# and the GitHub Action (action.yml: the agents the spec needs).
#   scripts/install-agents.sh claude,codex     # or: all; `scripted` needs nothing
# What to install comes from each agent's facts (orch/agents/installs.py): a new agent needs no line here.
# PYTHON: a Python that imports orch; default python3.
set -euo pipefail
python=${PYTHON:-python3}
plan=$("$python" -m orch.agents.installs "${1:-all}")  # exits 2 with one line for an unknown agent

while IFS=$'\t' read -r how prefix spec command config_npm; do
  case "$how" in
    npm)
      if [ ! -x "$prefix/node_modules/.bin/$command" ]; then
        command -v npm >/dev/null 2>&1 || { echo "install-agents: npm is missing (Node 20+)" >&2; exit 2; }
        echo "install-agents: installing $spec into $prefix"
        mkdir -p "$prefix"
        # Codex CLI's native binary comes in a per-platform optional dependency (never --omit=optional).
        npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error "$spec"
      fi
      "$prefix/node_modules/.bin/$command" --version >/dev/null
      # A package the agent would otherwise install from npm into each worker's config dir at every start
      # (opencode's plugins): installed once here, linked by its adapter.
      if [ "$config_npm" != - ] && [ ! -d "$prefix/config-deps/node_modules/${config_npm%@*}" ]; then
        mkdir -p "$prefix/config-deps"
        printf '{\n  "dependencies": {\n    "%s": "%s"\n  }\n}\n' "${config_npm%@*}" "${config_npm##*@}" \
          > "$prefix/config-deps/package.json"
        npm install --prefix "$prefix/config-deps" --no-audit --no-fund --loglevel=error
      fi
      ;;
    pip)  # in its own venv: it pins its own dependencies, which must not meet orch's
      if [ ! -x "$prefix/bin/$command" ]; then
        echo "install-agents: installing $spec into $prefix"
        python3 -m venv "$prefix"
        "$prefix/bin/pip" install --quiet "$spec"
      fi
      ;;
  esac
done <<<"$plan"
