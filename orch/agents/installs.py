"""What scripts/install-agents.sh installs for each agent, read from the agents' facts (AgentFacts.install,
cache_root, command), so a new agent needs no line in the script: `python -m orch.agents.installs all`."""

from __future__ import annotations

import sys

from orch.agents.registry import ADAPTERS, ALL_AGENTS, get_adapter
from orch.errors import UsageError

NONE = "-"
"""An empty field of a plan line (the script splits on tabs and bash's `read` drops empty fields)."""


def plan(kinds: str) -> list[str]:
    """One tab-separated line per agent to install: `npm|pip`, its prefix (npm) or venv (pip), the package
    spec, the command it installs, and the npm package it wants in its config dir (`-`: none). An agent with
    nothing to install (scripted) has no line; an unknown one is a UsageError."""
    names = list(ADAPTERS) if kinds == ALL_AGENTS else [k for k in kinds.split(",") if k]
    lines = []
    for name in names:
        facts = get_adapter(name).facts
        install = facts.install
        if install is None:
            continue
        how = "pip" if install.pip_command else "npm"
        command = install.pip_command or facts.command or facts.name
        fields = (how, str(facts.cache_root), install.spec(), command, install.config_npm or NONE)
        lines.append("\t".join(fields))
    return lines


def main(argv: list[str]) -> int:
    try:
        lines = plan(argv[0] if argv else ALL_AGENTS)
    except UsageError as exc:
        print(f"install-agents: {exc.one_line()}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
