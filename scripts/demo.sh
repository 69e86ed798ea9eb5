#!/usr/bin/env bash
# The main job on a fresh machine: check it and set up orch (scripts/setup.sh), install the one agent the demo
# runs (Claude Code, pinned, into ~/.cache/orch), and run the offline demo fleet: real Claude Code workers,
# orch's scripted model, no credentials. In a container when a worker image is built (`orch image build`),
# else on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/orch setup --agents claude
exec .venv/bin/orch demo "$@"
