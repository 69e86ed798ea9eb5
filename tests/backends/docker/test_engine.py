"""Which Docker engine a run uses: the client's base URL, the docker context."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orch.backends.docker.engine import engine_address, is_remote_client


@pytest.mark.pure
@pytest.mark.parametrize(
    ("base_url", "remote"),
    [
        ("http+docker://localhost", False),
        ("http+docker://localnpipe", False),
        ("http://127.0.0.1:2375", True),
        ("https://vps.example:2376", True),
        ("http+docker://ssh", True),
    ],
)
def test_remote_is_read_from_the_clients_base_url(base_url: str, remote: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORCH_DOCKER_REMOTE", raising=False)
    client: Any = SimpleNamespace(api=SimpleNamespace(base_url=base_url))
    assert is_remote_client(client) is remote
    monkeypatch.setenv("ORCH_DOCKER_REMOTE", "0")
    assert is_remote_client(client) is False


def test_docker_context_names_the_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no DOCKER_HOST, the current docker context's endpoint is the engine (as for the docker CLI)."""
    docker_cli = shutil.which("docker")
    if docker_cli is None:
        pytest.skip("the docker CLI is needed to make a context")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    assert engine_address() == "unix:///var/run/docker.sock"
    made = subprocess.run(
        [docker_cli, "context", "create", "vps", "--docker", "host=tcp://127.0.0.1:1"], capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    monkeypatch.setenv("DOCKER_CONTEXT", "vps")
    assert engine_address() == "tcp://127.0.0.1:1"
    monkeypatch.delenv("DOCKER_CONTEXT")
    subprocess.run([docker_cli, "context", "use", "vps"], capture_output=True, check=True)
    assert engine_address() == "tcp://127.0.0.1:1"
