#!/usr/bin/env bash
# The main job on a fresh machine: set up, build the worker image when a Docker engine answers, and run
# the offline demo fleet (real Claude Code workers, scripted model server, no credentials).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if .venv/bin/python -c 'from orch.backends.docker.engine import docker_client; docker_client()' 2>/dev/null; then
  # No registry or no base image: the demo still runs, locally (orch demo says so).
  .venv/bin/python -m orch.backends.docker.image --if-stale || echo "demo.sh: could not build the worker image; continuing" >&2
fi
exec .venv/bin/orch demo "$@"
