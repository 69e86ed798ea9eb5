#!/usr/bin/env bash
# Measure the quick start's cold install (docs/install.md's table): a fresh clone of this checkout with empty
# pip and npm caches and an empty agent cache and ORCH_HOME, then scripts/setup.sh, `orch setup --agents
# claude` and the offline demo, each timed; what was downloaded is what the fresh npm cache holds afterwards,
# and for PyPI the wheels `pip download` fetches for orch (a machine with a local wheel mirror, as ours,
# downloads none of them, but a cold one all). It downloads orch's dependencies from PyPI and Claude Code
# from npm (about 250 MB). Not run by CI.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work=$(mktemp -d /tmp/orch-cold-XXXXXX)
trap 'rm -rf "$work"' EXIT
git clone --quiet "$repo" "$work/orch"
export PIP_CACHE_DIR="$work/pip-cache" npm_config_cache="$work/npm-cache"
export XDG_CACHE_HOME="$work/xdg" ORCH_HOME="$work/orch-home"
cd "$work/orch"
mb() { du -sm "$1" 2>/dev/null | cut -f1 || echo 0; }
step() {  # step NAME CACHE COMMAND...: its seconds and what its cache grew by
  local name=$1 cache=$2 before after start log
  shift 2
  log="$work/step-$(echo "$name" | tr -c 'a-z0-9' '-').log"
  before=$(mb "$cache"); start=$(date +%s)
  "$@" >"$log" 2>&1 || { echo "measure: $name failed; its log:" >&2; tail -20 "$log" >&2; exit 1; }
  after=$(mb "$cache")
  printf '| %s | %s MB | %s |\n' "$name" "$((after - before))" "$(($(date +%s) - start))"
}
echo "| step | downloaded | seconds |"
echo "|---|---|---|"
step "scripts/setup.sh" "$work/wheels" sh -c 'scripts/setup.sh && .venv/bin/pip download --quiet -d "$0" .' "$work/wheels"
step "orch setup --agents claude" "$npm_config_cache" .venv/bin/orch setup --agents claude
step "orch demo --local" "$work/none" .venv/bin/orch demo --local
echo "measured $(date -u +%Y-%m-%d) on $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
