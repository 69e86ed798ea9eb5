"""Which part of a fleet each process is (`--only roles`): from its command line while it runs, else its
command name and its parents', as the kernel's exit record gives them (bench/cpuwindow.py).

A process's CPU goes to the program it ran last: the portal's start is its supervising shell's, since the
portal execs it (orch.backends.local.portal); what a process ran before an exec has no record of its own.
"""

from __future__ import annotations

from collections.abc import Iterable

from bench.cpuwindow import Proc

AGENT = "agent"
HOOKS = "hooks"
CLI = "orch CLI"
CONTROLLER = "controller"
WATCHDOG = "watchdog"
RELAY = "relay"
PORTALS = "portals"
SANDBOX = "sandbox"
GATEWAY = "gateway"
TMUX = "tmux"
MODEL = "model"
OTHER = "other"
ORCH = (HOOKS, CLI, CONTROLLER, WATCHDOG, RELAY, PORTALS, SANDBOX, GATEWAY, TMUX)
"""orch's own roles: its share is theirs over theirs and the agents'."""
ROLES = (AGENT, *ORCH, MODEL, OTHER)
MEANING = {
    AGENT: "the agent CLI and what it runs: its tool calls, git, its helpers",
    HOOKS: "hook and status-line commands (orch's hook writer, and the shell the agent starts it in)",
    CLI: "`orch` commands: a worker's `orch bus post`, `orch kill`",
    CONTROLLER: "`orch run` (less its watchdog thread) and the processes it waits for (`claude --version`)",
    WATCHDOG: "the controller's watchdog thread (processes, memory, disk)",
    RELAY: "the run's relay (each sandbox's bus, gateway and pane sockets)",
    PORTALS: "each sandbox's portal to the gateway, and its supervising shell",
    SANDBOX: "bubblewrap, setting up each worker's sandbox",
    GATEWAY: "the run's model gateway: its supervisor and server child",
    TMUX: "the tmux server, its clients and each pane's transcript `cat`",
    MODEL: "the scripted model (stands in for the model API: neither orch's nor the agents')",
    OTHER: "anything else in the fleet's cgroup",
}
AGENT_COMMS = {"claude", "node", "codex", "gemini", "opencode", "aider"}
HOOK_COMMS = {"orch-hook", "orch-approve"}
"""What orch's hook writer names itself (orch/run/hookwriter.py)."""
WATCHDOG_THREAD = "orch-watchdog"
PYTHONS = ("python3", "python3.11", "python")
MODULES = {
    "orch.offline.modelserver": MODEL,
    "orch.backends.local.relay": RELAY,
    "portal.py": PORTALS,
}
# The relay's module before the rooms moves (`--before` an older revision), spelled in two parts so that the
# moves' renaming script (which rewrites every old module name it finds) leaves it as it is.
MODULES["orch" + ".fleet.relay"] = RELAY


def _module(argv: tuple[str, ...]) -> str:
    """The `-m MODULE` or script a Python process runs, '' if none."""
    for i, arg in enumerate(argv):
        if arg == "-m" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.endswith(".py"):
            return arg.rsplit("/", 1)[-1]
    return ""


def _is_agent(proc: Proc) -> bool:
    return proc.comm in AGENT_COMMS and proc.parent is not None and proc.parent.comm not in ("orch", "python3")


def _under_agent(proc: Proc) -> Proc | None:
    """The agent process above this one, if any."""
    seen = proc.parent
    while seen is not None:
        if _is_agent(seen):
            return seen
        seen = seen.parent
    return None


def role(proc: Proc) -> str:
    """The role of one process (its watchdog thread is split off by `split`)."""
    module, comm = _module(proc.argv), proc.comm
    if comm in HOOK_COMMS or module == "hookwriter.py":
        return HOOKS
    agent = _under_agent(proc)
    if agent is not None:
        if comm == "orch":
            return CLI
        if proc.parent is agent and comm in ("sh", *PYTHONS):
            return HOOKS  # the agent starts a hook command in a shell; its tool calls run in bash
        if proc.parent is not None and proc.parent.parent is agent and proc.parent.comm == "sh":
            return HOOKS  # what a hook or status command runs (the hook writer, the status line's cat and mv)
        return AGENT
    if _is_agent(proc):
        return AGENT
    by_module = MODULES.get(module) or (GATEWAY if module.startswith("orch.gateway") else None)
    if by_module is not None:
        return by_module
    if comm == "orch":
        return CONTROLLER if "run" in proc.argv[:4] else CLI
    if comm.startswith("tmux") or (comm in ("utempter", "cat") and _parent_comm(proc).startswith("tmux")):
        return TMUX
    if comm == "bwrap":
        return SANDBOX
    if comm == "sh" and _parent_comm(proc) == "bwrap":
        return PORTALS  # the supervising shell: the portal's python start, then the exec'd shell
    parent = proc.parent
    while parent is not None:  # what orch's processes wait for (`claude --version`, bwrap's probe)
        if parent.comm == "orch":
            return role(parent)
        parent = parent.parent
    return OTHER


def _parent_comm(proc: Proc) -> str:
    return proc.parent.comm if proc.parent is not None else ""


def split(procs: Iterable[Proc]) -> tuple[dict[str, float], dict[str, int]]:
    """CPU seconds and processes by role; the controller's watchdog thread is its own role."""
    cpu = dict.fromkeys(ROLES, 0.0)
    count = dict.fromkeys(ROLES, 0)
    for proc in procs:
        name = role(proc)
        watchdog = proc.threads.get(WATCHDOG_THREAD, 0.0) if name == CONTROLLER else 0.0
        cpu[name] += proc.cpu - watchdog
        cpu[WATCHDOG] += watchdog
        count[name] += 1
    return cpu, count


def orch_share(cpu: dict[str, float]) -> float:
    """orch's CPU over orch's and the agents' (the scripted model and strangers left out)."""
    mine = sum(cpu[r] for r in ORCH)
    total = mine + cpu[AGENT]
    return mine / total if total > 0 else 0.0
