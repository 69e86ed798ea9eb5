"""What each agent CLI adds to the worker image: `orch image build --agents claude,AGENT` against Claude
Code's image alone, built from the same sources and base on the same engine.

Each image is tagged `orch-bench:AGENT` (Claude Code's `orch-bench:claude`) and built only when missing or
stale (its inputs-digest label, as `--if-stale`); `--quick` builds nothing and measures what is current.
The size is the engine's (uncompressed, every layer): the difference is exactly what `--agents
claude,AGENT` ships on top of the Claude-only image, the Node runtime included when the agent needs one
(a second Node agent would share it). The layers under /opt that differ are listed per directory (from
the image's history) so the note says where the bytes are. An agent the image cannot carry yet gets a
SKIPPED row with the build's reason; no engine, or no base image on it, skips the benchmark (nothing is
pulled).
"""

from __future__ import annotations

import re
import sys
import time
from typing import Any

from bench.core import Context, Result
from bench.table import Row
from orch.agents.registry import IMAGE_AGENT, image_installs
from orch.errors import OrchError
from orch.settings.user import BASE_IMAGE, CA_BUNDLE

AGENTS = ("codex", "gemini", "opencode", "aider")
TAG = "orch-bench:{agent}"
MIB = 1 << 20
# A layer's "created by" in the engine's history: `COPY dir:<hash> in /opt/node ` (classic builder) or
# `COPY /opt/node /opt/node # buildkit`.
_OPT_DIR = re.compile(r"(?:\bin |COPY \S+ )(/opt/[\w.-]+)")


def run(ctx: Context) -> Result:
    try:
        import docker.errors

        from orch.backends.docker.engine import docker_client
        from orch.backends.docker.image import build_image, image_is_current

        client = docker_client()
        base = BASE_IMAGE.get()
        ca_bundle = CA_BUNDLE.get()
    except (ImportError, OrchError) as exc:
        reason = exc.one_line() if isinstance(exc, OrchError) else str(exc)
        return Result(skipped=f"no Docker engine: {reason}")
    try:
        client.images.get(base)
    except docker.errors.ImageNotFound:
        return Result(skipped=f"base image {base} is not on this engine (set ORCH_BASE_IMAGE; nothing is pulled)")

    def current(agents: list[str]) -> tuple[Any | None, float | None]:
        """The image for `agents` (Claude Code's first), built now unless current; and the build time."""
        tag = TAG.format(agent=agents[-1])
        if image_is_current(tag, base, None, agents):
            return client.images.get(tag), None
        if ctx.config.quick:
            return None, None
        print(f"bench: images: building {tag} (--agents {','.join(agents)})", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        build_image(base, None, ca_bundle, tag, lambda _line: None, agents)
        return client.images.get(tag), time.monotonic() - t0

    alone, built = current([IMAGE_AGENT])
    if alone is None:
        return Result(skipped=f"{TAG.format(agent=IMAGE_AGENT)} not built or stale (`--quick` builds no image)")
    size = float(alone.attrs["Size"])
    raw: dict[str, Any] = {
        "base": base,
        IMAGE_AGENT: {"bytes": size, "build_s": built, "opt": opt_layers(alone.history())},
    }
    rows = [Row("images", f"{IMAGE_AGENT}: worker image, Claude Code alone", "MiB", [size / MIB], note=base)]
    for agent in AGENTS:
        try:
            image_installs([agent])  # UsageError when the image cannot carry it yet: no build to try
            image, built = current([IMAGE_AGENT, agent])
        except OrchError as exc:
            rows.append(Row("images", f"{agent}: skipped", "", status="SKIPPED", note=exc.one_line()))
            continue
        if image is None:
            note = f"{TAG.format(agent=agent)} not built or stale (`--quick` builds no image)"
            rows.append(Row("images", f"{agent}: skipped", "", status="SKIPPED", note=note))
            continue
        added = float(image.attrs["Size"]) - size
        layers = opt_layers(image.history())
        mine = {d: b for d, b in layers.items() if b != raw[IMAGE_AGENT]["opt"].get(d)}
        raw[agent] = {"bytes": image.attrs["Size"], "added_bytes": added, "build_s": built, "opt": layers}
        note = ", ".join(f"{d} {b / MIB:.0f} MiB" for d, b in sorted(mine.items(), key=lambda kv: -kv[1]))
        rows.append(
            Row("images", f"{agent}: image size added (--agents claude,{agent})", "MiB", [added / MIB], note=note)
        )
    return Result(rows=rows, raw=raw)


def opt_layers(history: list[dict[str, Any]]) -> dict[str, int]:
    """Bytes of an image's layers (its engine history) that copy a directory under /opt: what the agents
    and orch are."""
    out: dict[str, int] = {}
    for layer in history:
        match = _OPT_DIR.search(str(layer.get("CreatedBy") or ""))
        if match and layer.get("Size"):
            out[match.group(1)] = out.get(match.group(1), 0) + int(layer["Size"])
    return out
