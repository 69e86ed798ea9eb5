"""`orch run SPEC --replay FILE` on the container backend: the host copies the exported recording into the
run folder (RunFolder.replay_recording, in the gateway's `model/`) before the container starts, and the
gateway in the container answers from that copy, which no worker can alter.

The offline demo (its scripted-agent variant: the cheapest fleet that finds, verifies and refutes) is
recorded on this machine, exported, and replayed in a container: the same verdicts, no replay miss. One
of its steps tries to alter, replace or remove the recording its own run replays: locally there is none to
alter; in the container it cannot, and the replayed run still ends the same.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from orch.backends.docker import boot
from orch.backends.docker.sandbox import DockerSandbox
from orch.contracts import UpRequest
from orch.entry.demo import prepare
from orch.errors import UsageError
from orch.run.folder import RunFolder
from orch.run.records import ContainerInfo, DockerRunInfo, Isolation
from tests.dockertest import BUILD_TIMEOUT, RUN_UID, new_name
from tests.helpers import orch, run_info

# The attempt, as a worker's shell step: any of these succeeding alters what the run replays.
TAMPER = (
    "if (echo tampered >> {{run_dir}}/model/replay.orchrec.gz || chmod 666 {{run_dir}}/model/replay.orchrec.gz"
    " || mv {{run_dir}}/model/replay.orchrec.gz {{run_dir}}/model/old || rm {{run_dir}}/model/replay.orchrec.gz)"
    " 2>/dev/null; then printf 'RECORDING-%s' ALTERED; else printf 'RECORDING-%s' KEPT; fi"
)
"""Its output, RECORDING-ALTERED or RECORDING-KEPT, goes back to the model in the worker's next request (the
command itself spells neither)."""


def _demo_spec(name: str) -> Path:
    """The demo's spec and sample tree, its workers orch's scripted agent, worker 1 first trying TAMPER. Shared
    isolation: nothing of the container may start the checks' uid, so orch runs the findings' reproduce commands
    as the run's own uid, and the verdicts (the recording's verifiers cite orch's runs) come out as recorded,
    none UNVERIFIABLE (strict runs' reproduce in a container: tests/scenarios/test_hostile_docker.py)."""
    _, path = prepare(name)
    text = path.read_text().replace("\nworkers: 3\n", "\nworkers: 3\nagent: scripted\n", 1)
    assert "\nverification:\n" in text
    text = text.replace("\nverification:\n", "\nverification:\n  isolation: shared\n", 1)
    first = "    offline_script:\n"
    assert first in text
    path.write_text(text.replace(first, f"{first}      - bash: {json.dumps(TAMPER)}\n", 1))
    return path


def _answer_ids(run: RunFolder) -> set[str]:
    """The message ids of every answer the run's gateway gave: the scripted model mints a fresh one for each
    answer, so a replay's are the recording's."""
    bodies = "".join(gzip.decompress(path.read_bytes()).decode() for path in run.recordings())
    return set(re.findall(r"msg_[0-9a-f]{32}", bodies))


def _verdicts(run: RunFolder) -> dict[str, str]:
    return {f["id"]: f["status"] for f in json.loads(run.report_json.read_text())["findings"]}


def _tool_results(run: RunFolder, worker: int) -> str:
    """What worker `worker`'s tools gave back, as it told the model (its requests in the run's recording)."""
    out = []
    for line in gzip.decompress(run.exchanges(worker).read_bytes()).decode().splitlines():
        for message in json.loads(line)["request"].get("messages", []):
            content = message["content"] if isinstance(message["content"], list) else []
            out += [str(block.get("content")) for block in content if block.get("type") == "tool_result"]
    return "\n".join(out)


@pytest.mark.docker
@pytest.mark.timeout(BUILD_TIMEOUT)
def test_an_exported_demo_recording_replays_in_a_container_and_no_worker_alters_it(
    image: str, names: list[str], tmp_path: Path
) -> None:
    spec = _demo_spec("rec")
    recorded = orch("run", spec, "--local", "--name", "rec")
    assert recorded.exit_code == 0, recorded.output  # the demo refutes one of its two findings: it passes
    source = RunFolder.for_name("rec")
    assert "RECORDING-" in _tool_results(source, 1)  # the step ran (here with no recording to alter)
    exported = tmp_path / "demo.orchrec.gz"
    assert orch("record", "export", "rec", "-o", exported).exit_code == 0

    # A checkout elsewhere: a pristine tree, the same spec, the committed recording.
    checkout = tmp_path / "checkout"
    shutil.copytree(spec.parent / "workdir", checkout / "workdir")
    shutil.copy(spec, checkout / "fleet.yaml")
    if os.getuid() == 0:  # the container's uid must write it (CI runs as root)
        for p in [checkout / "workdir", *(checkout / "workdir").rglob("*")]:
            os.chown(p, RUN_UID, RUN_UID)
    name = new_name(names, "rp")
    replayed = orch("run", checkout / "fleet.yaml", "--replay", exported, "--name", name, "--json")
    assert replayed.exit_code == 0, replayed.output
    run = RunFolder.for_name(name)
    summary = json.loads(replayed.output.strip().splitlines()[-1])
    assert summary["billed"] is False and summary["replay_of"] == str(exported.resolve())
    assert run.info().replay == f"/orch/runs/{name}/model/replay.orchrec.gz"  # the container's own copy
    assert _verdicts(run) == _verdicts(source) and "UNVERIFIABLE" not in _verdicts(run).values()
    assert run.info().isolation is Isolation.SHARED
    reproduced = [json.loads(line) for line in run.events.read_text().splitlines() if '"reproduced"' in line]
    assert reproduced and all(e["data"].get("error") is None for e in reproduced), reproduced
    assert _answer_ids(run) and _answer_ids(run) <= _answer_ids(source)  # answered from the recording
    assert "replay-miss" not in run.model_log.read_text()
    # The worker tried and failed; the copy is what was exported, byte for byte.
    assert "RECORDING-KEPT" in _tool_results(run, 1) and "RECORDING-ALTERED" not in _tool_results(run, 1)
    assert run.replay_recording.read_bytes() == exported.read_bytes()
    assert not (run.model_dir / "old").exists()


@pytest.mark.pure
def test_a_container_run_refuses_a_recorded_run_folder_before_making_anything(tmp_path: Path) -> None:
    """A run folder is this machine's: the container replays an exported file (`orch record export`)."""
    folder = tmp_path / "recorded"
    folder.mkdir()
    request = UpRequest(name="rp", workers=1, agent="scripted", workdir=tmp_path, replay=folder)
    with pytest.raises(UsageError, match="replays an exported recording") as caught:
        DockerSandbox().up(request)
    assert "orch record export" in (caught.value.hint or "")
    assert not RunFolder.for_name("rp").root.exists()


@pytest.mark.pure
def test_a_container_replay_hands_its_init_no_upstream_and_no_credential(monkeypatch: pytest.MonkeyPatch) -> None:
    """The boot line of a replay (even of a live spec, with a credential in the host's environment): the
    recording's path in the run folder, no upstream, nothing to hold."""
    canary = "sk-ant-api03-CANARY-replaydocker-0123456789abcdef"
    monkeypatch.setenv("ANTHROPIC_API_KEY", canary)
    info = run_info("rp", container=ContainerInfo(name="orch-rp", image="i", host_run_dir="/x", user="1000:1000"))
    assert isinstance(info, DockerRunInfo) and not info.offline
    info.replay = str(RunFolder(Path("/orch/runs/rp")).replay_recording)
    given = boot.init_boot(info, boot.upstream(info))
    assert (given.upstreams, given.replay, given.offline) == ([], "/orch/runs/rp/model/replay.orchrec.gz", True)
    assert canary not in boot.boot_line(given)
