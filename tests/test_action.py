"""The GitHub Action (action.yml) and docs/ci.md's example workflows: linted with actionlint (and the
action's scripts with shellcheck through it), the GitLab job parsed and checked; and the action's steps
run the way a runner runs them (bash, the same commands, the same environment variables) against the
offline demo replayed from an exported recording, in a fresh ORCH_HOME."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from orch.entry.demo import DEMO_NAME, EXPECTED
from orch.run.folder import RunFolder
from orch.run.paths import orch_home
from tests.helpers import SAMPLE, orch

REPO = Path(__file__).resolve().parent.parent
ACTION = REPO / "action.yml"
CI_DOC = REPO / "docs" / "ci.md"
BIN = Path(sys.executable).parent
CANARY = "sk-ant-api03-CANARY-action-0123456789abcdef"


def doc_blocks() -> dict[str, str]:
    """docs/ci.md's YAML blocks, by the file name each names on its first line (`# .gitlab-ci.yml`)."""
    blocks = re.findall(r"```yaml\n(# (\S+)\n.*?)```", CI_DOC.read_text(), re.DOTALL)
    return {name: text for text, name in blocks}


def action() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(ACTION.read_text())
    return data


def actionlint(repo: Path) -> subprocess.CompletedProcess[str]:
    argv = [str(BIN / "actionlint"), "-shellcheck", str(BIN / "shellcheck"), "-no-color"]
    return subprocess.run(argv, cwd=repo, capture_output=True, text=True, timeout=120, check=False)


def test_the_action_and_the_example_workflow_pass_actionlint(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".github" / "workflows").mkdir(parents=True)
    (repo / ".git").mkdir()  # actionlint finds the project by its .git
    shutil.copy(ACTION, repo / "action.yml")
    # The example as a user writes it, with the action as this checkout (`./`): actionlint then checks the
    # inputs it passes against action.yml's.
    example = doc_blocks()[".github/workflows/orch.yml"]
    assert "uses: OWNER/orch@main" in example
    (repo / ".github" / "workflows" / "orch.yml").write_text(example.replace("OWNER/orch@main", "./"))
    # The action's own steps as a workflow's (composite steps are workflow steps): expressions, contexts
    # and every `run:` script (shellcheck) are checked. Its inputs become the workflow's.
    spec = action()
    inputs = {k: {"type": "string", "required": bool(v.get("required")), "default": v.get("default", "")}
              for k, v in spec["inputs"].items()}  # fmt: skip
    for value in inputs.values():
        if value["required"]:
            del value["default"]
    steps = json.loads(json.dumps(spec["runs"]["steps"]).replace("github.action_path", "github.workspace"))
    workflow = {"name": "action", "on": {"workflow_call": {"inputs": inputs}},
                "jobs": {"action": {"runs-on": "ubuntu-latest", "steps": steps}}}  # fmt: skip
    (repo / ".github" / "workflows" / "action-steps.yml").write_text(yaml.safe_dump(workflow, sort_keys=False))
    done = actionlint(repo)
    assert done.returncode == 0, done.stdout + done.stderr
    # And it does check: a wrong input name, a script error.
    (repo / ".github" / "workflows" / "orch.yml").write_text(example.replace("OWNER/orch@main", "./").replace(
        "recording:", "recordin:"))  # fmt: skip
    done = actionlint(repo)
    assert done.returncode == 1 and "recordin" in done.stdout, done.stdout


def test_the_gitlab_example_has_what_a_job_needs() -> None:
    config = yaml.safe_load(doc_blocks()[".gitlab-ci.yml"])
    job = config["orch-fleet"]
    assert job["stage"] in config["stages"]
    assert {"image", "variables", "before_script", "script", "artifacts"} <= job.keys()
    assert job["variables"]["ORCH_HOME"] == "$CI_PROJECT_DIR/.orch"
    (command,) = [line for line in job["script"] if line.startswith("orch run ")]
    assert "--replay" in command and "--json" in command and "--name ci" in command
    assert job["allow_failure"] == {"exit_codes": [4]}  # docs/ci.md's table: 4, a finding refuted
    assert ".orch/runs/ci/" in job["artifacts"]["paths"]
    assert job["artifacts"]["reports"]["junit"] == ".orch/runs/ci/report.junit.xml"
    assert "orch setup --agents claude" in job["before_script"]
    assert job["variables"]["XDG_CACHE_HOME"] == "$CI_PROJECT_DIR/.cache"  # the cached .cache/orch
    help_text = orch("run", "--help").output
    assert all(flag in help_text for flag in ("--replay", "--json", "--quiet", "--local", "--name"))


# --- the action's steps, as a runner runs them ----------------------------------------------------------
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def evaluate(text: str, inputs: Mapping[str, str], outputs: Mapping[str, Mapping[str, str]]) -> str:
    """The expressions the action's env and with blocks use: inputs.X, steps.ID.outputs.X (anything else
    would need the runner, so it fails here: the action keeps its run steps to these)."""

    def one(match: re.Match[str]) -> str:
        expr = match.group(1)
        if m := re.fullmatch(r"inputs\.([\w-]+)", expr):
            return inputs[m.group(1)]
        if m := re.fullmatch(r"steps\.([\w-]+)\.outputs\.([\w-]+)", expr):
            return outputs.get(m.group(1), {}).get(m.group(2), "")
        raise AssertionError(f"an expression the test runner does not evaluate: {expr}")

    return EXPRESSION.sub(one, text)


def run_steps(
    given: Mapping[str, str], env: Mapping[str, str], cwd: Path, stop_on_failure: bool = False
) -> tuple[list[tuple[dict[str, Any], int | None]], dict[str, dict[str, str]]]:
    """Each step of action.yml in order: a `run:` step in bash with its env (GITHUB_OUTPUT fresh per step,
    read back into steps.ID.outputs); a `uses:` step skipped, its `with:` evaluated for the caller."""
    spec = action()
    inputs = {k: given.get(k, str(v.get("default", ""))) for k, v in spec["inputs"].items()}
    assert set(given) <= set(inputs), f"unknown inputs: {set(given) - set(inputs)}"
    outputs: dict[str, dict[str, str]] = {}
    ran: list[tuple[dict[str, Any], int | None]] = []
    for n, step in enumerate(spec["runs"]["steps"]):
        if "uses" in step:
            with_ = {k: evaluate(str(v), inputs, outputs) for k, v in step.get("with", {}).items()}
            ran.append(({**step, "with": with_}, None))
            continue
        assert step["shell"] == "bash"
        output_file = Path(env["RUNNER_TEMP"]) / f"output-{n}"
        output_file.write_text("")
        step_env = {**env, "GITHUB_OUTPUT": str(output_file)}
        step_env.update({k: evaluate(str(v), inputs, outputs) for k, v in step.get("env", {}).items()})
        # As the runner: `bash --noprofile --norc -eo pipefail {0}` on the script written to a file.
        script = Path(env["RUNNER_TEMP"]) / f"step-{n}.sh"
        script.write_text(step["run"])
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], env=step_env,
                              cwd=cwd, capture_output=True, text=True, timeout=900, check=False)  # fmt: skip
        ran.append((step, done.returncode))
        if "id" in step:
            outputs[step["id"]] = dict(
                line.split("=", 1) for line in output_file.read_text().splitlines() if "=" in line
            )
        if done.returncode != 0 and step is not spec["runs"]["steps"][-1]:
            if not stop_on_failure:
                raise AssertionError(f"step {step.get('name')} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
            ran[-1] = ({**step, "stderr": done.stderr}, done.returncode)
            break  # as a runner: the steps after a failed one do not run (none here is `if: always()`)
    return ran, outputs


def runner_env(workspace: Path, runner_temp: Path) -> dict[str, str]:
    """What a runner sets for an action's steps, with this venv first on PATH (as actions/setup-python)."""
    env = {k: v for k, v in os.environ.items() if k not in ("ORCH_HOME", "ANTHROPIC_API_KEY")}
    env.update({
        "PATH": f"{BIN}{os.pathsep}{env['PATH']}",
        "GITHUB_ACTION_PATH": str(REPO), "GITHUB_WORKSPACE": str(workspace), "GITHUB_ACTIONS": "true",
        "RUNNER_TEMP": str(runner_temp), "RUNNER_OS": "Linux", "GITHUB_STEP_SUMMARY": str(runner_temp / "summary.md"),
    })  # fmt: skip
    return env


def test_a_bad_spec_stops_the_action_at_install_with_its_problem(tmp_path: Path) -> None:
    (tmp_path / "fleet.yaml").write_text("workdir: nowhere\ntasks: []\n")
    ran, outputs = run_steps({"spec": "fleet.yaml"}, runner_env(tmp_path, tmp_path), tmp_path, stop_on_failure=True)
    step, code = ran[-1]
    assert step["name"] == "Install orch and the agents the spec needs" and code == 2
    assert "fleet.yaml" in step["stderr"] and "Traceback" not in step["stderr"], step["stderr"]
    assert "run" not in outputs  # the fleet never ran


def verdicts(report_json: Path) -> dict[str, str]:
    return {f["id"]: f["status"] for f in json.loads(report_json.read_text())["findings"]}


@pytest.mark.claude
def test_the_actions_steps_replay_an_exported_demo_recording_to_the_same_verdicts(
    claude_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Done-means of issue 24: the demo recorded offline (with a credential in the environment that must
    not travel), exported, and replayed by the action's steps in a fresh ORCH_HOME: same verdicts, no
    model, the outputs and the job summary set."""
    monkeypatch.setenv("ORCH_CLAUDE_BIN", str(claude_bin))
    monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY)
    recorded = orch("demo", "--local", "--name", DEMO_NAME)
    assert recorded.exit_code == 0, recorded.output
    run = RunFolder.for_name(DEMO_NAME)
    assert verdicts(run.report_json) == {k: v.value for k, v in EXPECTED.items()}

    # A checkout: the spec, a pristine copy of the tree it audits, and the committed recording.
    workspace = tmp_path / "workspace"
    shutil.copytree(SAMPLE, workspace / "workdir")
    shutil.copy(orch_home() / "demo" / DEMO_NAME / "fleet.yaml", workspace / "fleet.yaml")
    exported = orch("record", "export", DEMO_NAME, "-o", workspace / "ci" / "demo.orchrec.gz")
    assert exported.exit_code == 0, exported.output
    assert CANARY.encode() not in gzip.decompress((workspace / "ci" / "demo.orchrec.gz").read_bytes())

    runner_temp = tmp_path / "runner-temp"
    runner_temp.mkdir()
    env = runner_env(workspace, runner_temp)
    # fail-on high: the demo's CONFIRMED finding (high) fails the job, the REFUTED one never does.
    inputs = {"spec": "fleet.yaml", "recording": "ci/demo.orchrec.gz", "fail-on": "high"}
    ran, outputs = run_steps(inputs, env, workspace)

    out = outputs["run"]
    assert out["exit-code"] == "6" and out["status"] == "findings"  # pages-F1, CONFIRMED and high
    assert (out["confirmed"], out["refuted"], out["unverified"]) == ("1", "1", "0")
    replay = RunFolder(runner_temp / "orch-home" / "runs" / f"{DEMO_NAME}-replay")
    assert out["run-folder"] == str(replay.root.resolve()) and out["report"] == str(replay.report_md.resolve())
    assert verdicts(replay.report_json) == verdicts(run.report_json)  # the same verdicts, fresh ORCH_HOME
    assert "replay-miss" not in replay.model_log.read_text()
    line = json.loads(out["summary"])
    assert (line["exit_code"], line["fail_on"], line["billed"]) == (6, "high", False)
    assert line["unbilled"] == "replayed a recording" and "pages-F1 (high)" in line["reason"]
    assert line["replay_of"] == str((workspace / "ci" / "demo.orchrec.gz").resolve())
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    assert "## Verification matrix" in summary and "pages-F1" in summary and "## Findings" not in summary

    uses = {step["uses"].split("@")[0]: step for step, code in ran if code is None}
    assert set(uses) == {"actions/cache", "github/codeql-action/upload-sarif", "actions/upload-artifact"}
    assert uses["actions/upload-artifact"]["with"]["path"] == out["run-folder"]
    assert re.fullmatch(r"orch-Linux-local-[0-9a-f]{16}", uses["actions/cache"]["with"]["key"])
    assert "steps.run.outputs.sarif != ''" in uses["github/codeql-action/upload-sarif"]["if"]
    # report.sarif comes with the `sarif` branch (RunFolder.report_sarif); until then no SARIF is uploaded.
    sarif = getattr(replay, "report_sarif", None)
    if sarif is not None:
        assert out["sarif"] == str(sarif.resolve()) and sarif.is_file()
        assert uses["github/codeql-action/upload-sarif"]["with"]["sarif_file"] == out["sarif"]
    else:
        assert out["sarif"] == ""
    junit = getattr(replay, "report_junit", None)  # likewise report.junit.xml
    assert out["junit"] == (str(junit.resolve()) if junit is not None else "")
    last_step, last_code = ran[-1]
    assert last_step["name"] == "Exit with orch's code" and last_code == 6  # fail-on-exit: after the uploads
