"""Build the orch worker image (docker/Dockerfile) through the engine's API, streaming its progress.

The build context is made fresh for each build and holds only what the Dockerfile reads: the Dockerfile,
docker/with-ca.sh, `ca-bundle.crt` (the caller's extra CA bundle, or an empty file) and src/ with
pyproject.toml, README.md and the orch package. The bundle is used only in the Dockerfile's builder stage.

`python -m orch.backends.docker.image` builds with ORCH_BASE_IMAGE / ORCH_CA_BUNDLE / ORCH_IMAGE from the environment.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import io
import re
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import docker.errors
import requests.exceptions
from docker.models.images import Image

from orch.agents.registry import IMAGE_AGENT, image_install, image_installs
from orch.backends.docker.engine import docker_client
from orch.errors import OrchError, SandboxError, UsageError
from orch.settings.user import BASE_IMAGE, CA_BUNDLE, IMAGE
from orch.text import shorten
from orch.versions import NODE_VERSION

REPO_ROOT = Path(__file__).resolve().parents[3]
DOCKER_DIR = REPO_ROOT / "docker"
CONTEXT_CA_NAME = "ca-bundle.crt"
# Seconds the client waits for the next chunk of build output; a quiet npm install can take minutes.
BUILD_READ_TIMEOUT = 3600

DIGEST_LABEL = "orch.inputs-digest"
AGENTS_LABEL = "orch.agents"
BASE_LABEL = "orch.base-image"
MESSAGE_CHARS = 300  # of the engine's message in an error

_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NONZERO = re.compile(r"^The command .* returned a non-zero code: (\d+)$", re.DOTALL)
# Lines a failing tool prints about why: npm, apt, pip, shells.
_ERRORISH = re.compile(r"npm ERR!|^E: |^ERROR|error:|Error:|not found|No such file", re.IGNORECASE)


def _find_image(tag: str) -> Image | None:
    """The engine's image by this name, None when it has none (raises UsageError when no engine answers)."""
    client = docker_client()
    try:
        return client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as exc:
        raise SandboxError(f"cannot inspect image {tag}: {exc.explanation or exc}") from exc


def image_exists(tag: str) -> bool:
    """Whether the engine has an image by this name (raises UsageError when no engine answers)."""
    return _find_image(tag) is not None


def build_image(
    base: str,
    agent_version: str | None,
    ca_bundle: Path | None,
    tag: str,
    on_progress: Callable[[str], None],
    agents: Sequence[str] = (IMAGE_AGENT,),
) -> str:
    """Build the worker image FROM `base` with version `agent_version` of its agent CLI (None: the
    version its adapter pins, orch.agents.registry.image_install); return the image id.

    `ca_bundle` is an extra PEM bundle trusted by npm and pip during the build only (for TLS-intercepting
    proxies); None for none. Each line of build output goes to `on_progress`. `agents`: the agent CLIs
    the image carries beside its own (`orch image build --agents`), each at its adapter's pinned version.
    """
    if ca_bundle is not None and not ca_bundle.is_file():
        raise UsageError(
            f"CA bundle not found: {ca_bundle}",
            hint="pass an existing PEM file (e.g. /etc/ssl/certs/ca-certificates.crt) or no CA bundle",
        )
    image_installs(agents)  # an agent it cannot carry: refused before the engine is asked anything
    client = docker_client()
    try:
        client.images.get(base)
    except docker.errors.ImageNotFound:
        on_progress(f"base image {base} is not on this engine: the build will try to pull it")
    except docker.errors.APIError as exc:
        raise SandboxError(f"cannot inspect base image {base}: {exc.explanation or exc}") from exc

    digest = inputs_digest(base, agent_version, agents)
    with tempfile.TemporaryFile(prefix="orch-build-context-") as context:
        _write_context(context, ca_bundle)
        context.seek(0)
        try:
            stream = client.api.build(
                fileobj=context,
                custom_context=True,
                tag=tag,
                buildargs=build_args(base, agent_version, agents),
                labels={DIGEST_LABEL: digest, BASE_LABEL: base},
                rm=True,
                forcerm=True,
                pull=False,
                decode=True,
                timeout=BUILD_READ_TIMEOUT,
            )
            image_id = _follow(stream, base, on_progress)
        except docker.errors.APIError as exc:
            raise SandboxError(
                f"image build of {tag} refused by the engine: {shorten(exc.explanation or str(exc), MESSAGE_CHARS)}"
            ) from exc
        except docker.errors.DockerException as exc:  # raised before any request: e.g. a malformed tag
            raise UsageError(f"cannot build {tag}: {shorten(str(exc), MESSAGE_CHARS)}") from exc
        except requests.exceptions.RequestException as exc:
            raise SandboxError(
                f"lost the Docker engine while building {tag}: {shorten(str(exc), MESSAGE_CHARS)}",
                hint="check the engine's log and retry",
            ) from exc
    if image_id is None:
        image_id = str(client.images.get(tag).id)
    return image_id


def _follow(stream: Iterable[Mapping[str, Any]], base: str, on_progress: Callable[[str], None]) -> str | None:
    """Forward build output; return the image id the engine reports, raise on the first build error."""
    image_id: str | None = None
    step = ""
    step_of = ""
    recent: collections.deque[str] = collections.deque(maxlen=60)
    pending = ""  # the engine splits output into chunks anywhere, also inside a line

    def emit(text: str) -> None:
        nonlocal step, step_of
        line = _ANSI.sub("", text).rstrip()
        if not line:
            return
        on_progress(line)
        match = _STEP.match(line)
        if match:
            step, step_of = match.group(3), f"{match.group(1)}/{match.group(2)}"
            recent.clear()
        elif not line.startswith((" ---> ", "Removing intermediate container")):
            recent.append(line)

    for chunk in stream:
        aux = chunk.get("aux")
        if isinstance(aux, Mapping) and isinstance(aux.get("ID"), str):
            image_id = aux["ID"]
        if "error" in chunk or "errorDetail" in chunk:
            emit(pending)
            detail = chunk.get("errorDetail") or {}
            message = _ANSI.sub("", str(detail.get("message") or chunk.get("error") or "unknown error"))
            on_progress(f"ERROR: {message.rstrip()}")
            raise _build_error(message, step, step_of, base, recent)
        text = chunk.get("stream") or chunk.get("status")
        if isinstance(text, str):
            *lines, pending = (pending + text).replace("\r\n", "\n").split("\n")
            for line in lines:
                emit(line)
    emit(pending)
    return image_id


def _build_error(message: str, step: str, step_of: str, base: str, recent: Iterable[str]) -> OrchError:
    if step.upper().startswith("FROM "):
        return UsageError(
            f"base image {base} is not available to the Docker engine: {shorten(message, MESSAGE_CHARS)}",
            hint=f"docker pull {base}, or use --base-image with an image the engine has locally "
            "(scripts/ci-base-image.sh makes orch-base:bookworm without a registry)",
        )
    # The step's own words (npm's "ERR!" lines, apt's "E:") say more than the shell's exit code.
    lines = [line for line in recent if line.strip()]
    telling = [line for line in lines if _ERRORISH.search(line)][:3] or lines[-2:]
    nonzero = _NONZERO.match(message.strip())
    what = f"exit code {nonzero.group(1)}" if nonzero else shorten(message, MESSAGE_CHARS)
    cause = f": {shorten(' | '.join(telling), 240)}" if telling else ""
    return SandboxError(
        f"image build failed at step {step_of} ({shorten(step, 80)}): {what}{cause}",
        hint="the full build log went to the progress output; fix the cause and build again",
    )


def build_args(base: str, agent_version: str | None, agents: Sequence[str]) -> dict[str, str]:
    """The Dockerfile's build args: the base, the image's own agent, and every other agent asked for."""
    others = image_installs(agents).values()
    return {
        "BASE": base,
        **image_install().build_args(agent_version),
        "AGENT_NPM": " ".join(install.spec() for install in others if not install.pip_command),
        "AGENT_CONFIG_NPM": " ".join(install.config_npm for install in others if install.config_npm),
        "AGENT_PIP": " ".join(f"{i.pip_command}={i.spec()}" for i in others if i.pip_command),
        "NODE_VERSION": NODE_VERSION if any(install.node for install in others) else "",
        "AGENTS": ",".join(image_agents(agents)),
    }


def image_agents(agents: Sequence[str]) -> list[str]:
    """The agents an image built for `agents` carries, its own first (what its `orch.agents` label says)."""
    return list(dict.fromkeys([IMAGE_AGENT, *image_installs(agents)]))


def carried_agents(image: Image) -> set[str]:
    """The agents an image carries (its label; an image from before the label: its own agent only)."""
    return set((image.labels.get(AGENTS_LABEL) or IMAGE_AGENT).split(",")) | {"scripted"}


def inputs_digest(base: str, agent_version: str | None = None, agents: Sequence[str] = (IMAGE_AGENT,)) -> str:
    """A digest of everything that decides the image's content (the CA bundle only carries TLS: not it)."""
    digest = hashlib.sha256()
    for part in build_args(base, agent_version, agents).values():
        digest.update(part.encode() + b"\0")
    for name, data, mode in _context_entries():
        digest.update(f"{name}\0{mode:o}\0{len(data)}\0".encode() + data)
    return digest.hexdigest()


def image_is_current(
    tag: str, base: str, agent_version: str | None = None, agents: Sequence[str] = (IMAGE_AGENT,)
) -> bool:
    """Whether `tag` exists and was built by build_image from these inputs and the current sources."""
    image = _find_image(tag)
    return image is not None and image.labels.get(DIGEST_LABEL) == inputs_digest(base, agent_version, agents)


def carries_current(tag: str, base: str, agents: Sequence[str]) -> bool:
    """Whether `tag` carries `agents` and was built by build_image from the current sources, for the agents
    its label says it carries (an image with more agents than asked serves as well)."""
    image = _find_image(tag)
    if image is None or not set(agents) <= carried_agents(image):
        return False
    built_for = (image.labels.get(AGENTS_LABEL) or IMAGE_AGENT).split(",")
    return image.labels.get(DIGEST_LABEL) == inputs_digest(base, None, built_for)


def _context_entries() -> list[tuple[str, bytes, int]]:
    """(name, content, mode) of the build context's files, the CA bundle aside, in a stable order."""
    dockerfile = DOCKER_DIR / "Dockerfile"
    helper = DOCKER_DIR / "with-ca.sh"
    pyproject = REPO_ROOT / "pyproject.toml"
    package = REPO_ROOT / "orch"
    for needed in (dockerfile, helper, pyproject):
        if not needed.is_file():
            raise UsageError(
                f"cannot build the image: {needed} is missing",
                hint="build from a source checkout of orch (the image is built from its docker/ folder)",
            )
    readme = REPO_ROOT / "README.md"
    entries = [
        ("Dockerfile", dockerfile.read_bytes(), 0o644),
        ("with-ca.sh", helper.read_bytes(), 0o755),
        ("src/pyproject.toml", pyproject.read_bytes(), 0o644),
        ("src/README.md", readme.read_bytes() if readme.is_file() else b"# orch\n", 0o644),
    ]
    for path in sorted(package.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".pyo"):
            entries.append((f"src/orch/{path.relative_to(package).as_posix()}", path.read_bytes(), 0o644))
    return entries


def _write_context(fileobj: IO[bytes], ca_bundle: Path | None) -> None:
    """The build context as a tar: only what docker/Dockerfile reads, with stable metadata."""
    try:
        ca = ca_bundle.read_bytes() if ca_bundle is not None else b""
    except OSError as exc:
        raise UsageError(f"cannot read CA bundle {ca_bundle}: {exc.strerror or exc}") from exc
    with tarfile.open(fileobj=fileobj, mode="w") as tar:
        for name, data, mode in [*_context_entries(), (CONTEXT_CA_NAME, ca, 0o644)]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = mode
            info.mtime = 0  # stable metadata keeps the engine's layer cache warm between identical builds
            tar.addfile(info, io.BytesIO(data))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m orch.backends.docker.image", description="Build the orch worker image."
    )
    try:
        base, ca_bundle, tag = BASE_IMAGE.get(), CA_BUNDLE.get(), IMAGE.get()
    except OrchError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    parser.add_argument("--base-image", "--base", dest="base", default=base)
    parser.add_argument("--ca-bundle", type=Path, default=ca_bundle)
    parser.add_argument("--tag", default=tag)
    parser.add_argument("--claude-version", dest="agent_version", help="agent CLI version (default: pinned)")
    parser.add_argument("--agents", default=IMAGE_AGENT, help="comma list of the agent CLIs the image carries, or all")
    parser.add_argument("--if-missing", action="store_true", help="do nothing if the tag exists already")
    parser.add_argument(
        "--if-stale",
        action="store_true",
        help="do nothing if the tag exists and was built from these inputs and the current sources",
    )
    args = parser.parse_args(argv)
    try:
        if args.if_missing and image_exists(args.tag):
            print(f"{args.tag} already present", file=sys.stderr)
            return 0
        agents = [a.strip() for a in args.agents.split(",") if a.strip()]
        if args.if_stale and image_is_current(args.tag, args.base, args.agent_version, agents):
            print(f"{args.tag} is up to date", file=sys.stderr)
            return 0
        image_id = build_image(args.base, args.agent_version, args.ca_bundle, args.tag, _print_progress, agents)
    except OrchError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    print(f"built {args.tag} ({image_id})")
    return 0


def _print_progress(line: str) -> None:
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
