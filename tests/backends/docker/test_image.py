"""The worker image: what it runs, who it runs as, and that a build-time CA bundle never ships in it.

Tests marked `docker` need an engine: they skip when none answers, except under CI=true, where they fail.
The image is built once per session (base ORCH_BASE_IMAGE, default orch-base:bookworm from
scripts/ci-base-image.sh; CA bundle ORCH_CA_BUNDLE; every agent: tests/dockertest.py IMAGE_AGENTS) unless
orch:latest is already built from these sources.
"""

from __future__ import annotations

import importlib
import io
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path

import docker.errors
import pytest

from orch.backends.docker.engine import docker_client
from orch.backends.docker.image import (
    CONTEXT_CA_NAME,
    _write_context,
    build_args,
    build_image,
    image_agents,
    image_exists,
    image_is_current,
    inputs_digest,
)
from orch.errors import SandboxError, UsageError
from orch.run.folder import RunFolder
from orch.versions import (
    AIDER_VERSION,
    CLAUDE_CODE_VERSION,
    CODEX_VERSION,
    DEFAULT_IMAGE_TAG,
    GEMINI_CLI_VERSION,
    NODE_VERSION,
    OPENCODE_VERSION,
    TMUX_MIN_VERSION,
)
from tests.dockertest import BASE, BUILD_TIMEOUT, CA_BUNDLE, IMAGE_AGENTS
from tests.helpers import orch

TAG = DEFAULT_IMAGE_TAG


def run(engine: docker.DockerClient, image: str, *command: str, user: str | None = None) -> str:
    """Run a command in a throwaway container; its stdout+stderr as text (raises on a non-zero exit)."""
    output = engine.containers.run(
        image, list(command), remove=True, stdout=True, stderr=True, user=user or "", network_disabled=True
    )
    assert isinstance(output, bytes)
    return output.decode()


def _cli_exists() -> bool:
    try:
        return hasattr(importlib.import_module("orch.cli.main"), "main")
    except ImportError:
        return False


# --- what the image runs ---------------------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.timeout(BUILD_TIMEOUT)
def test_claude_code_is_the_pinned_version(engine: docker.DockerClient, image: str) -> None:
    assert run(engine, image, "claude", "--version").strip() == f"{CLAUDE_CODE_VERSION} (Claude Code)"


@pytest.mark.docker
@pytest.mark.timeout(BUILD_TIMEOUT)
def test_runs_as_worker_1000(engine: docker.DockerClient, image: str) -> None:
    out = run(engine, image, "sh", "-c", 'id -u; id -g; id -un; echo "$HOME"; pwd')
    assert out.split() == ["1000", "1000", "worker", "/home/worker", "/home/worker"]


@pytest.mark.docker
@pytest.mark.timeout(BUILD_TIMEOUT)
def test_tmux_is_recent_enough(engine: docker.DockerClient, image: str) -> None:
    out = run(engine, image, "tmux", "-V").strip()
    match = re.match(r"tmux (\d+)\.(\d+)", out)
    assert match, out
    assert (int(match.group(1)), int(match.group(2))) >= TMUX_MIN_VERSION, out


@pytest.mark.docker
@pytest.mark.timeout(BUILD_TIMEOUT)
def test_orch_is_installed(engine: docker.DockerClient, image: str) -> None:
    if _cli_exists():
        out = run(engine, image, "orch", "--help")
        assert "usage" in out.lower(), out
    else:  # the CLI is not written yet: the package must still import from the image's venv
        out = run(engine, image, "python", "-c", "import orch, sys; print(orch.__file__, sys.prefix)")
        assert "/opt/orch" in out, out


@pytest.mark.docker
@pytest.mark.timeout(BUILD_TIMEOUT)
def test_runtime_tools_and_only_the_pinned_node(engine: docker.DockerClient, image: str) -> None:
    """The firewall tools and tini are there. Node is only the npm registry's pinned runtime that Gemini CLI
    needs (Claude Code, Codex and opencode are native binaries): no Debian nodejs, no npm."""
    out = run(
        engine,
        image,
        "sh",
        "-c",
        "for t in iptables ipset ip tini python3 tmux; do command -v $t >/dev/null || echo missing $t; done;"
        " command -v nodejs npm || true; command -v node; node --version",
    )
    assert out.split() == ["/opt/node/bin/node", f"v{NODE_VERSION}"], out


@pytest.mark.docker
@pytest.mark.timeout(BUILD_TIMEOUT)
def test_every_agent_is_its_pinned_version(engine: docker.DockerClient, image: str) -> None:
    """The tests' image carries every agent (tests/dockertest.py: IMAGE_AGENTS), each at its pin, each one
    command on PATH; aider from its own venv, linked."""
    out = run(
        engine,
        image,
        "sh",
        "-c",
        "codex --version; gemini --version; opencode --version; aider --version; readlink -f $(command -v aider);"
        " ls /opt/agents/config-deps/node_modules/@opencode-ai",
    )
    assert out.split() == [
        "codex-cli", CODEX_VERSION, GEMINI_CLI_VERSION, OPENCODE_VERSION, "aider", AIDER_VERSION,
        "/opt/pip/aider/bin/aider", "plugin", "sdk",
    ], out  # fmt: skip


@pytest.mark.docker
@pytest.mark.timeout(BUILD_TIMEOUT)
def test_environment_and_labels(engine: docker.DockerClient, image: str) -> None:
    config = engine.images.get(image).attrs["Config"]
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["DISABLE_AUTOUPDATER"] == "1"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert env["ORCH_HOME"] == "/orch"
    assert env["PATH"].startswith("/opt/orch/bin:/opt/claude/node_modules/.bin:")
    assert config["User"] == "worker"
    assert config["Labels"]["org.opencontainers.image.title"] == "orch"
    assert config["Labels"]["orch.claude-code-version"] == CLAUDE_CODE_VERSION
    assert config["Labels"]["orch.agents"] == ",".join(image_agents(IMAGE_AGENTS))
    assert config["Entrypoint"] == ["/usr/bin/tini", "--"]
    # apt lists are cleaned; ORCH_HOME is writable by the worker
    check = "ls /var/lib/apt/lists | grep -v -e '^lock$' -e '^partial$'; test -w /orch"
    out = run(engine, image, "sh", "-c", check)
    assert out.strip() == "", out


# --- the CA bundle stays in the builder stage ------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.timeout(BUILD_TIMEOUT)
def test_ca_bundle_not_in_final_image(engine: docker.DockerClient, image: str) -> None:
    history = engine.images.get(image).history()
    created_by = "\n".join(str(layer.get("CreatedBy", "")) for layer in history)
    for needle in (CONTEXT_CA_NAME, "with-ca", "/tmp/ca", "NODE_EXTRA_CA_CERTS", "PIP_CERT"):
        assert needle not in created_by, f"{needle!r} in the image history:\n{created_by}"

    found = run(
        engine,
        image,
        "sh",
        "-c",
        "ls -d /tmp/ca /usr/local/bin/with-ca 2>/dev/null;"
        " find / -xdev \\( -name 'ca-bundle.crt*' -o -name combined.pem -o -name .npmrc \\) -print",
        user="root",
    )
    assert found.strip() == "", found

    # The certificates the bundle adds to Debian's stock ones (e.g. an intercepting proxy's CA) appear in
    # no file of the image. Needs the bundle the image was built with; with a stock bundle nothing is extra.
    if CA_BUNDLE is None:
        return
    stock = run(engine, image, "cat", "/etc/ssl/certs/ca-certificates.crt")
    extra = [cert for cert in _pem_certs(CA_BUNDLE.read_text()) if cert not in stock]
    for cert in extra:
        body = [line for line in cert.splitlines() if line and not line.startswith("-----")]
        needle = body[len(body) // 2]  # one 64-character line from the middle of the certificate
        hits = run(
            engine,
            image,
            "sh",
            "-c",
            f"grep -rlF -e '{needle}' / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev || true",
            user="root",
        )
        assert hits.strip() == "", f"a certificate from {CA_BUNDLE} is in the image: {hits}"


def _pem_certs(text: str) -> Iterator[str]:
    yield from re.findall(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", text, re.DOTALL)


@pytest.mark.docker
@pytest.mark.timeout(BUILD_TIMEOUT)
def test_image_lookups(engine: docker.DockerClient, image: str, monkeypatch: pytest.MonkeyPatch) -> None:
    absent = "orch-test-absent:none"
    assert image_exists(image) and image_is_current(image, BASE, CLAUDE_CODE_VERSION, IMAGE_AGENTS)
    assert not image_is_current(image, BASE, "0.0.0-other", IMAGE_AGENTS)  # other inputs: another digest
    assert not image_is_current(image, BASE, CLAUDE_CODE_VERSION, ["claude"])  # other agents: another digest
    assert not image_exists(absent) and not image_is_current(absent, BASE, CLAUDE_CODE_VERSION)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    with pytest.raises(UsageError):
        image_exists(image)
    with pytest.raises(UsageError):
        image_is_current(image, BASE, CLAUDE_CODE_VERSION)


# --- failures come back as one-line errors with hints ----------------------------------------------------


@pytest.mark.docker
def test_missing_base_image_is_a_usage_error(engine: docker.DockerClient) -> None:
    # A registry on a closed local port: the engine's pull fails at once, and no traffic leaves the host.
    base = "localhost:1/orch-missing-base:none"
    with pytest.raises(UsageError) as caught:
        build_image(base, CLAUDE_CODE_VERSION, None, "orch-test-missing-base:none", lambda _: None)
    err = caught.value
    assert "\n" not in err.one_line()
    assert base in err.message
    assert err.hint is not None
    assert f"docker pull {base}" in err.hint
    assert "--base-image" in err.hint
    with pytest.raises(docker.errors.ImageNotFound):
        engine.images.get("orch-test-missing-base:none")


@pytest.mark.docker
@pytest.mark.timeout(BUILD_TIMEOUT)
def test_failing_step_names_the_step_and_its_error(engine: docker.DockerClient, image: str) -> None:
    # Depends on `image` so the apt layers are cached: only the npm step runs, and fails.
    with pytest.raises(SandboxError) as caught:
        build_image(BASE, "0.0.0-no-such-version", CA_BUNDLE, "orch-test-broken:none", lambda _: None)
    text = caught.value.one_line()
    assert "\n" not in text
    assert re.search(r"at step \d+/\d+ \(RUN with-ca npm install", text), text
    assert "No matching version found" in text, text


def test_unreachable_engine_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    with pytest.raises(UsageError) as caught:
        docker_client()
    assert "Docker engine not reachable at unix:///nonexistent.sock" in caught.value.message
    assert caught.value.hint
    assert "\n" not in caught.value.one_line()


def test_missing_ca_bundle_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")  # checked before the engine is asked
    with pytest.raises(UsageError) as caught:
        build_image(BASE, CLAUDE_CODE_VERSION, tmp_path / "nope.crt", "orch-test:none", lambda _: None)
    assert "CA bundle not found" in caught.value.message


def test_an_agent_the_image_cannot_carry_is_refused_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")  # checked before the engine is asked
    result = orch("image", "build", "--agents", "claude,nope", "--tag", "orch-test:none")
    assert result.exit_code == 2 and "unknown agent 'nope'" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("with_ca", [False, True])
def test_build_context_holds_only_what_the_dockerfile_needs(tmp_path: Path, with_ca: bool) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    buffer = io.BytesIO()
    _write_context(buffer, ca if with_ca else None)
    buffer.seek(0)
    with tarfile.open(fileobj=buffer) as tar:
        names = tar.getnames()
        member = tar.extractfile(CONTEXT_CA_NAME)
        assert member is not None
        ca_content = member.read()
    assert {n for n in names if not n.startswith("src/orch/")} == {
        "Dockerfile",
        "with-ca.sh",
        CONTEXT_CA_NAME,
        "src/pyproject.toml",
        "src/README.md",
    }
    assert "src/orch/__init__.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert ca_content == (ca.read_bytes() if with_ca else b"")


def test_build_args_carry_each_agent_pinned_and_node_only_when_needed() -> None:
    alone = build_args("base:x", None, ["claude"])
    assert alone["AGENT_NPM"] == alone["AGENT_PIP"] == alone["AGENT_CONFIG_NPM"] == alone["NODE_VERSION"] == ""
    assert alone["AGENTS"] == "claude"
    mixed = build_args("base:x", None, ["claude", "codex", "opencode", "scripted"])
    assert mixed["AGENT_NPM"] == f"@openai/codex@{CODEX_VERSION} opencode-ai@{OPENCODE_VERSION}"
    assert mixed["AGENT_CONFIG_NPM"] == f"@opencode-ai/plugin@{OPENCODE_VERSION}"  # linked, never fetched at run
    assert mixed["NODE_VERSION"] == "" and mixed["AGENT_PIP"] == ""  # both native binaries: no Node
    assert mixed["AGENTS"] == "claude,codex,opencode"
    assert build_args("base:x", None, ["gemini"])["NODE_VERSION"] == NODE_VERSION  # a Node program
    aider = build_args("base:x", None, ["aider"])
    assert aider["AGENT_PIP"] == f"aider=aider-chat=={AIDER_VERSION}" and aider["AGENT_NPM"] == ""
    every = build_args("base:x", None, ["all"])
    assert every["AGENTS"] == "claude,codex,gemini,opencode,aider" and every["NODE_VERSION"] == NODE_VERSION
    assert inputs_digest("base:x", None, ["claude"]) != inputs_digest("base:x", None, ["claude", "codex"])
    with pytest.raises(UsageError, match="unknown agent 'nope'"):
        build_args("base:x", None, ["nope"])


@pytest.mark.docker
@pytest.mark.timeout(BUILD_TIMEOUT)
def test_up_refuses_a_fleet_its_image_cannot_run(image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_IMAGE", BASE)  # no orch.agents label: an image from before it, Claude Code alone
    result = orch("up", "noimg", "--agents", "claude:1,codex:1", "--offline", "--workdir", tmp_path)
    assert result.exit_code == 2, result.output
    assert "does not carry agent codex" in result.output and "--agents claude,codex" in result.output
    assert not RunFolder.for_name("noimg").root.exists()
