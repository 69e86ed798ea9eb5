#!/usr/bin/env bash
# Install pinned agent CLIs into ~/.cache/orch (npm prefixes and a venv; no global install), where orch
# finds them. Idempotent: an agent already there is left alone. Used by scripts/setup.sh (all of them)
# and the GitHub Action (action.yml: the agents the spec needs).
#   scripts/install-agents.sh claude,codex     # or: all; `scripted` needs nothing
# PYTHON: a Python that imports orch (for the pinned versions, orch/versions.py); default python3.
set -euo pipefail
python=${PYTHON:-python3}
pin() { "$python" -c "import orch.versions as v; print(v.$1)"; }
cache="$HOME/.cache/orch"
kinds=${1:-all}
[ "$kinds" = all ] && kinds=claude,codex,opencode,aider,gemini

npm_agent() {  # npm_agent DIR PACKAGE VERSION BIN
  local prefix="$cache/$1/$3"
  if [ ! -x "$prefix/node_modules/.bin/$4" ]; then
    command -v npm >/dev/null 2>&1 || { echo "install-agents: npm is missing (Node 20+)" >&2; exit 2; }
    echo "install-agents: installing $2@$3 into $prefix"
    mkdir -p "$prefix"
    npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error "$2@$3"
  fi
  "$prefix/node_modules/.bin/$4" --version >/dev/null
}

IFS=, read -r -a wanted <<<"$kinds"
for kind in "${wanted[@]}"; do
  case "$kind" in
    claude) npm_agent claude-code "$(pin CLAUDE_CODE_PACKAGE)" "$(pin CLAUDE_CODE_VERSION)" claude ;;
    # Codex CLI: its native binary comes in a per-platform optional dependency (never --omit=optional).
    codex) npm_agent codex "$(pin CODEX_PACKAGE)" "$(pin CODEX_VERSION)" codex ;;
    gemini) npm_agent gemini-cli "$(pin GEMINI_CLI_PACKAGE)" "$(pin GEMINI_CLI_VERSION)" gemini ;;
    opencode)
      version=$(pin OPENCODE_VERSION)
      npm_agent opencode "$(pin OPENCODE_PACKAGE)" "$version" opencode
      # The plugin package opencode would otherwise install from npm into each worker's config dir at every
      # start (orch links this copy instead: orch/agents/opencode.py).
      prefix="$cache/opencode/$version"
      if [ ! -d "$prefix/config-deps/node_modules/@opencode-ai/plugin" ]; then
        mkdir -p "$prefix/config-deps"
        printf '{\n  "dependencies": {\n    "%s": "%s"\n  }\n}\n' "$(pin OPENCODE_PLUGIN_PACKAGE)" "$version" \
          > "$prefix/config-deps/package.json"
        npm install --prefix "$prefix/config-deps" --no-audit --no-fund --loglevel=error
      fi
      ;;
    aider)  # in its own venv: it pins its own dependencies, which must not meet orch's
      version=$(pin AIDER_VERSION)
      prefix="$cache/aider/$version"
      if [ ! -x "$prefix/bin/aider" ]; then
        echo "install-agents: installing $(pin AIDER_PACKAGE)==$version into $prefix"
        python3 -m venv "$prefix"
        "$prefix/bin/pip" install --quiet "$(pin AIDER_PACKAGE)==$version"
      fi
      ;;
    scripted | "") ;;
    *) echo "install-agents: unknown agent kind: $kind (claude, codex, gemini, opencode, aider, scripted)" >&2; exit 2 ;;
  esac
done
