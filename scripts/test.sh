#!/usr/bin/env bash
# The project's one test command: set up, lint, type-check, then run the whole suite against a real
# tmux, the real agent binaries, and (when an engine answers) a real Docker engine with a worker image that
# carries every agent. The dev tools (pytest, mypy, ruff, actionlint) and every agent CLI are installed here
# only: the demo needs neither.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The dev extras on every run, whatever made .venv: scripts/setup.sh installs orch alone, and an older venv
# keeps older tools (setuptools < 77 cannot build orch's wheel: tests/test_packaging.py).
.venv/bin/pip install --quiet --disable-pip-version-check -e '.[dev]'
.venv/bin/orch setup --agents all

if .venv/bin/python -c 'import sys; from orch.backends.docker.engine import docker_client; docker_client()' 2>/dev/null; then
  # The image build is cached by Docker; ORCH_BASE_IMAGE / ORCH_CA_BUNDLE pick the base and a CA bundle.
  # It carries the agents the docker tests run (tests/dockertest.py: IMAGE_AGENTS).
  agents=$(.venv/bin/python -c 'from tests.dockertest import IMAGE_AGENTS; print(",".join(IMAGE_AGENTS))')
  .venv/bin/python -m orch.backends.docker.image --if-stale --agents "$agents"
fi

.venv/bin/ruff check orch tests bench
.venv/bin/ruff format --check orch tests bench
.venv/bin/mypy
# --durations: the CI log names the slowest tests, which the tiers' budget watches (CONTRIBUTING.md).
if [ "$#" -gt 0 ]; then
  exec .venv/bin/pytest --durations=30 "$@"
fi
# The fast tier on every core (pytest-xdist; each test has its own ORCH_HOME and tmux socket dir), then the
# slow tiers one test at a time (they share the Docker engine and each starts real agents). Both run, and
# the first failure's exit code is the script's.
status=0
.venv/bin/pytest -m fast -n auto --durations=30 || status=$?
slow=0
.venv/bin/pytest -m "not fast" --durations=30 || slow=$?
[ "$status" -ne 0 ] || status=$slow
exit "$status"
