"""Defaults of command-line options that have no variable: a run container's limits and each worker's caps."""

from __future__ import annotations

# --- the run container (`orch up --memory ...`) ----------------------------------------------------
CONTAINER_MEMORY = "8g"
"""`orch up --memory`: the run container's memory limit (no swap beyond it)."""
CONTAINER_PIDS = 4096
"""`orch up --pids`: the run container's process/thread limit."""
CONTAINER_CPUS = 2.0
"""`orch up --cpus`: at most this many CPUs, fewer on a machine with fewer."""

# --- per-worker caps (`orch up --pids-per-worker ...`, the spec's `limits`; SECURITY.md "Caps") -------
WORKER_PIDS = 512
"""Processes and threads one worker's uid may have (RLIMIT_NPROC counts threads: Node has ~15)."""
WORKER_MEMORY = "2g"
"""Resident memory of one worker's processes together before the controller's watchdog stops them."""
WORKER_DISK = "1g"
"""Bytes one worker may have written (its outbox, session store, config dir, tmp); also each file's cap."""
RUN_FOLDER_MAX = "20g"
"""The run folder's size past which the controller stops the biggest writer and fails its job."""
CAPS_RESERVE = 256
"""Processes the container keeps beyond the workers' caps, for the controller, tmux and the gateway."""
