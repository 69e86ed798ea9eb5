"""`orch demo`: the first thing a new user runs.

Three real Claude Code workers look at a small bundled library (package data `orch/data/demo/`):
worker 1 reports a real defect in pages.py, worker 2 a plausible false positive about stats.py; each
finding goes to the two other workers, briefed to refute it. Offline (the default) the scripted model
server drives the workers, so no credentials are needed: the verifiers' verdicts come from running the
finding's reproduce command in their own Bash tool. `--live` runs the same fleet on the real model.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from orch.agents.registry import get_adapter
from orch.backends import registry as backends
from orch.backends.base import Backend
from orch.errors import UsageError
from orch.jobs.changes import ChangeStatus
from orch.jobs.state import FindingStatus
from orch.lead.changes.gitcmd import git
from orch.report.model import RunReport
from orch.run.paths import orch_home
from orch.spec.load import load_spec
from orch.spec.model import FleetSpec

DEMO_NAME = "demo"
EXPECTED = {"pages-F1": FindingStatus.CONFIRMED, "stats-F1": FindingStatus.REFUTED}
MIXED = ("claude", "codex", "gemini")
"""`orch demo --mixed`: worker by worker, three kinds. Each finding goes to the two workers that did not
report it, so the Claude Code finder's finding is verified by Codex CLI and Gemini CLI, the Codex finder's by
Claude Code and Gemini CLI: every verdict comes from another kind than its finding."""
CHANGES_NAME = "demo-changes"
CHANGES_AGENTS = ("claude", "codex")
"""`orch demo --changes`: Claude Code writers 1 and 3, a Codex writer 2, which also reviews the others' changes."""
EXPECTED_CHANGES = {"mean": ChangeStatus.LANDED, "cheat": ChangeStatus.REJECTED, "note": ChangeStatus.LANDED}
DEMO_AUTHOR = ("-c", "user.name=orch demo", "-c", "user.email=demo@orch.invalid")


@dataclass(frozen=True)
class DemoPlan:
    spec: FleetSpec
    spec_path: Path
    backend: Backend
    notice: str | None
    """Why the demo does not run in a container, when it does not."""


def _data() -> Path:
    return Path(str(resources.files("orch") / "data" / "demo"))


def prepare(name: str = DEMO_NAME, live: bool = False, mixed: bool = False) -> tuple[FleetSpec, Path]:
    """A fresh copy of the sample repository and the demo spec under $ORCH_HOME/demo/NAME."""
    base = orch_home() / "demo" / name
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    shutil.copytree(_data() / "sample", base / "workdir")
    text = (_data() / "fleet.yaml").read_text(encoding="utf-8")
    if mixed:
        groups = "".join(f"  - {{agent: {kind}, workers: 1}}\n" for kind in MIXED)  # one group a worker, in order
        text = text.replace("\nworkers: 3\n", f"\nagents:\n{groups}")
    text += f"\noffline: {'false' if live else 'true'}\n"
    spec_path = base / "fleet.yaml"
    spec_path.write_text(text, encoding="utf-8")
    return load_spec(spec_path), spec_path


def prepare_changes(name: str = CHANGES_NAME, live: bool = False) -> tuple[FleetSpec, Path]:
    """`orch demo --changes`: a fresh git repository of the tiny calculator (one commit) and the demo spec
    under $ORCH_HOME/demo/NAME. The run reads that repository only; its changes land in the run's own."""
    base = orch_home() / "demo" / name
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    data = _data() / "changes"
    workdir = base / "workdir"
    shutil.copytree(data / "sample", workdir)
    git(None, "init", "-q", "-b", "main", cwd=workdir)
    git(None, "add", "-A", cwd=workdir)
    git(None, *DEMO_AUTHOR, "commit", "-q", "-m", "a tiny calculator", cwd=workdir)
    text = (data / "fleet.yaml").read_text(encoding="utf-8") + f"\noffline: {'false' if live else 'true'}\n"
    spec_path = base / "fleet.yaml"
    spec_path.write_text(text, encoding="utf-8")
    return load_spec(spec_path), spec_path


def check_live_credentials(agent: str) -> None:
    credentials = get_adapter(agent).facts.credentials
    if not credentials.env or credentials.in_env(os.environ) or credentials.login_file(os.environ) is not None:
        return
    raise UsageError(
        f"orch demo --live needs credentials for its {agent} workers, and none were found",
        hint=f"{credentials.hint}; or run `orch demo` without --live (offline, no credentials)",
    )


def plan(
    where: Backend | None, live: bool, name: str = DEMO_NAME, mixed: bool = False, changes: bool = False
) -> DemoPlan:
    """The demo's spec and backend: the one named (`where`), else the default one if it can run the demo's
    agents here now, else the local one, with a notice saying why."""
    spec, spec_path = prepare_changes(name, live) if changes else prepare(name, live, mixed)
    if live:
        for group in spec.groups():
            check_live_credentials(group.agent)
    if where is not None:
        return DemoPlan(spec, spec_path, where, None)
    chosen = backends.chosen(None)
    why = chosen.ready(dict.fromkeys(g.agent for g in spec.groups()))
    if why is None:
        return DemoPlan(spec, spec_path, chosen, None)
    notice = f"{chosen.title} is not available ({why}): running the demo locally, as with --local"
    return DemoPlan(spec, spec_path, backends.get_backend("local"), notice)


def shows_verification(report: RunReport) -> bool:
    """True when the offline demo came out as designed: the real defect CONFIRMED, the false positive REFUTED."""
    got = {row.id: row.status for row in report.findings}
    return got == EXPECTED


def shows_changes(report: RunReport) -> bool:
    """True when `orch demo --changes` came out as designed: the honest fix and the comment LANDED (one of
    them after a rebase), the test-editing "fix" REJECTED for scope."""
    got = {row.task: row.status for row in report.changes}
    rebased = any(row.rebases > 0 and row.status is ChangeStatus.LANDED for row in report.changes)
    cheat = next((row for row in report.changes if row.task == "cheat"), None)
    return got == EXPECTED_CHANGES and rebased and cheat is not None and cheat.reason == "scope"
