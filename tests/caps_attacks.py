"""Workers that try to exhaust what the others need (issue 23's hostile tests), as offline scripts: one run
carries a process bomb, a disk filler, a memory hog and a late writer beside an honest finder, locally
(tests/scenarios/test_contain_local.py) and in the container (tests/scenarios/test_contain_docker.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import PAGES_QUOTE, PAGES_REPRO

RESULT = {"write": "{{result_file}}", "content": "checked what the brief asked\n"}
DONE = [{"bash": "touch {{done_file}}"}, {"reply": "Finished."}]
NO_FINDINGS = {"write": "{{findings_file}}", "content": json.dumps({"job": "{{job}}", "findings": []})}
OUTBOX = "{{run_dir}}/outbox/agent-{{worker}}"


def bomb(real: bool) -> dict[str, str]:
    """Left running after the job: a real fork bomb (only where RLIMIT_NPROC holds it: a worker's own uid
    in the container), or (locally, where the tests run as root and no rlimit holds) 400 sleepers."""
    inner = "b(){ b | b & }; b" if real else "for i in $(seq 400); do sleep 300 & done; wait"
    return {"bash": f"setsid nohup sh -c '{inner}' >/dev/null 2>&1 </dev/null & echo left"}


def fill(chunk_mib: int) -> dict[str, str]:
    """Three files into its outbox, each as big as RLIMIT_FSIZE lets it (the kernel stops each at the
    per-file cap; together they pass the worker's disk cap); meant to land 3 GiB on the host's disk."""
    parts = "; ".join(f"head -c {1024 * chunk_mib}k /dev/zero > {OUTBOX}/fill{i}.bin" for i in range(3))
    return {"bash": f"{parts}; sleep 5; ls -la {OUTBOX}"}


# Grows its resident memory 64 MiB at a time up to 3 GiB, slowly enough for the watchdog to see it.
HOG = {
    "bash": "python3 -c 'import time\nb = []\nfor _ in range(48):\n    b.append(bytearray(64 << 20))\n"
    "    time.sleep(0.1)\ntime.sleep(30)'; echo survived"
}
# Left running by the late writer's first job: once its next job's findings file appears, it overwrites it
# (and keeps doing so) with a finding the worker never reported.
LATE = {
    "bash": "setsid nohup sh -c 'while [ ! -e "
    + OUTBOX
    + "/t5.findings.json ]; do sleep 0.2; done; for i in $(seq 200); do echo "
    + '"{\\"job\\": \\"t5\\", \\"findings\\": []}"'
    + " > "
    + OUTBOX
    + "/t5.findings.json; echo late >> "
    + OUTBOX
    + "/late.log; sleep 0.2; done' >/dev/null 2>&1 </dev/null & echo left"
}


def honest_finding() -> dict[str, str]:
    finding = {
        "id": "F1",
        "claim": "paginate skips page 1",
        "severity": "high",
        "evidence": [{"file": "pages.py", "line": 15, "quote": PAGES_QUOTE}],
        "reproduce": PAGES_REPRO,
    }
    return {"write": "{{findings_file}}", "content": json.dumps({"job": "{{job}}", "findings": [finding]})}


def spec(path: Path, workdir: Path, real_bomb: bool, limits: dict[str, Any], **extra: Any) -> Path:
    """Workers 1-3 attack (bomb, disk, memory), worker 4 leaves a late writer on t4 and then finds the
    true defect on t5; a restarted attacker verifies it."""
    scripts = {
        "t1": (1, [bomb(real_bomb), NO_FINDINGS, RESULT, *DONE]),
        "t2": (2, [fill(1024), NO_FINDINGS, RESULT, *DONE]),
        "t3": (3, [HOG, NO_FINDINGS, RESULT, *DONE]),
        "t4": (4, [LATE, NO_FINDINGS, RESULT, *DONE]),
        "t5": (4, [honest_finding(), RESULT, *DONE]),
    }
    goal = "Determine whether paginate() in pages.py is correct."
    tasks = [{"id": t, "goal": goal, "worker": n, "offline_script": steps} for t, (n, steps) in scripts.items()]
    body: dict[str, Any] = {
        "workdir": str(workdir),
        "offline": True,
        "workers": 4,
        "tasks": tasks,
        "verification": {"verifiers_per_finding": 1},
        "timeouts": {"boot": 120, "job": 240, "run": 600},
        "limits": {"nudge_after": 30, "max_corrections": 0, "restart_backoff": 0.5, **limits},
        **extra,
    }
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path
