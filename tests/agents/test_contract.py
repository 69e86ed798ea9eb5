"""Every registered agent adapter keeps the AgentAdapter contract and states complete facts; nothing outside
orch/agents/ reaches an adapter but through the registry."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import orch
from orch.agents.registry import ADAPTERS, DEFAULT_AGENT, IMAGE_AGENT, get_adapter, image_install
from orch.container.image import DOCKER_DIR
from orch.container.serverun import link_sessions
from orch.contracts import (
    TEXT_SHELL,
    AgentAdapter,
    Check,
    Credentials,
    GatewayEnv,
    ImageInstall,
    LoginFile,
    SessionStore,
)
from orch.errors import UsageError
from orch.fleet import launch
from orch.gateway import protocols
from orch.gateway.records import Scheme
from orch.offline import chat as offline_chat
from orch.offline import gemini as offline_gemini
from orch.offline import responses as offline_responses
from orch.run.folder import RunFolder
from tests.helpers import run_info

PACKAGE = Path(orch.__file__).parent
ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_adapter_keeps_the_contract(name: str) -> None:
    adapter = get_adapter(name)
    assert isinstance(adapter, AgentAdapter)
    assert adapter.name == name
    assert adapter.default_permission_mode in adapter.permission_modes
    assert all(isinstance(d.keys, tuple) and d.keys for d in adapter.dialogs())
    assert all(isinstance(check, Check) for check in adapter.doctor())


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_adapter_states_complete_facts(name: str) -> None:
    adapter = get_adapter(name)
    creds = adapter.credentials
    assert isinstance(creds, Credentials)
    assert all(ENV_NAME.match(var) for var in creds.variables)
    if creds.env:  # it calls a real model API: where, how to get a key, how the gateway presents each one
        assert creds.api_host and creds.base_url_env and creds.hint
        assert {var for var, _ in creds.schemes} == set(creds.env)
        assert all(Scheme(scheme) for _, scheme in creds.schemes)
        # The gateway protocols it speaks: its upstream serves these and refuses every other API's calls.
        assert creds.protocols and set(creds.protocols) <= set(protocols.BY_NAME)
        assert isinstance(adapter.gateway, GatewayEnv)
        # A worker's environment drops `variables`, then gets these two: they must be among them.
        assert adapter.gateway.key_env in creds.env and adapter.gateway.base_url_env == creds.base_url_env
    else:
        assert adapter.gateway is None and creds.login is None
    if creds.login is not None:
        assert isinstance(creds.login, LoginFile) and ENV_NAME.match(creds.login.dir_env)
        assert not Path(creds.login.in_home).is_absolute() and ".." not in Path(creds.login.in_home).parts
    if adapter.sessions is not None:
        assert isinstance(adapter.sessions, SessionStore)
        sub = Path(adapter.sessions.subdir)
        assert adapter.sessions.subdir and not sub.is_absolute() and ".." not in sub.parts
    if adapter.install is not None:
        assert isinstance(adapter.install, ImageInstall)
        assert adapter.install.package and re.match(r"^\d+\.\d+\.\d+", adapter.install.version)
        assert ENV_NAME.match(adapter.install.build_arg)
        # A pip command is one word (the image links /opt/pip/bin/<command>); config packages are pinned.
        assert adapter.install.pip_command is None or re.fullmatch(r"[a-z][a-z0-9_-]*", adapter.install.pip_command)
        assert adapter.install.config_npm is None or re.fullmatch(r"\S+@\d+\.\d+\.\d+", adapter.install.config_npm)


def test_the_image_build_reads_its_agent_from_the_adapter() -> None:
    install = image_install()
    assert install == get_adapter(IMAGE_AGENT).install
    dockerfile = (DOCKER_DIR / "Dockerfile").read_text()
    for arg, value in install.build_args().items():
        assert f"ARG {arg}\n" in dockerfile and "${" + arg + "}" in dockerfile
        assert f"ARG {arg}={value}\n" in dockerfile  # the file's defaults mirror the adapter's
    assert get_adapter(DEFAULT_AGENT).name == DEFAULT_AGENT


def test_unknown_agent_lists_the_available_ones() -> None:
    with pytest.raises(UsageError) as err:
        get_adapter("nope")
    assert all(name in err.value.message for name in ADAPTERS)


def test_login_file_follows_the_config_dir_variable(tmp_path: Path) -> None:
    login = LoginFile(dir_env="X_CONFIG_DIR", home_dir=".x", name="login.json")
    assert login.find({}, tmp_path) is None
    (tmp_path / ".x").mkdir()
    (tmp_path / ".x" / "login.json").write_text("{}")
    assert login.find({}, tmp_path) == tmp_path / ".x" / "login.json"
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    assert login.find({"X_CONFIG_DIR": str(moved)}, tmp_path) is None
    (moved / "login.json").write_text("{}")
    assert login.find({"X_CONFIG_DIR": str(moved)}, tmp_path) == moved / "login.json"


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_worker_environment_holds_no_credential(name: str, tmp_path: Path) -> None:
    """The tmux server's environment (every pane's) never carries the user's credential or base URL:
    those go to the gateway only, and each worker's own base URL and token come with its pane."""
    adapters = [get_adapter(kind) for kind in sorted(ADAPTERS)]
    real = {var: "real-secret" for a in adapters for var in a.credentials.variables}
    # A fleet of this kind, with one worker of every other kind beside it (a mixed fleet).
    others = {n: kind for n, kind in enumerate(sorted(set(ADAPTERS) - {name}), 2)}
    info = run_info("env", workers=len(ADAPTERS)).model_copy(update={"agent": name, "worker_agents": others})
    ci = {"CI": "true", "CONTINUOUS_INTEGRATION": "1", "CI_JOB_TOKEN": "x"}  # a CI machine's markers
    with pytest.MonkeyPatch.context() as mp:
        for var, value in {**real, **ci}.items():
            mp.setenv(var, value)
        env = launch.agent_environment(info)
    assert "real-secret" not in env.values()
    assert not set(real) & set(env)
    assert not set(ci) & set(env)  # a pane is interactive: TUIs that see these do not start (Gemini CLI)


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_container_session_store_lives_in_the_run_folder(name: str) -> None:
    run = RunFolder.for_name("s")
    run.root.mkdir(parents=True)
    link_sessions(run, {1: name, 2: name})
    sessions = get_adapter(name).sessions
    for n in (1, 2):
        link = run.config_dir(n) / sessions.subdir if sessions else None
        assert link is None or (link.is_symlink() and link.resolve() == run.sessions(n).resolve())


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_adapters_are_reached_only_through_the_registry() -> None:
    adapter_modules = {
        f"orch.agents.{p.stem}" for p in (PACKAGE / "agents").glob("*.py") if p.stem not in ("__init__", "registry")
    }
    offenders = {
        f"{path.relative_to(PACKAGE.parent)}: {name}"
        for path in PACKAGE.rglob("*.py")
        if "agents" not in path.relative_to(PACKAGE).parts[:1]
        for name in _imports(path) & adapter_modules
    }
    assert not offenders, "import orch.agents.registry (get_adapter) instead: " + "; ".join(sorted(offenders))


def test_each_agent_names_the_shell_tool_its_model_calls() -> None:
    """The lead matches a verifier's cited commands against its own agent's shell calls in the gateway's
    ledger: each adapter names the tool as the offline model's translator for its API calls it."""
    shells = {name: get_adapter(name).shell for name in sorted(ADAPTERS)}
    # No tool calls: aider runs the lines of its answers' shell blocks, which the gateway ledgers as TEXT_SHELL.
    assert shells["aider"] is not None and shells["aider"].name == TEXT_SHELL
    for name, tool in {"claude": "Bash", "scripted": "Bash", "codex": offline_responses.SHELL_TOOL,
                       "gemini": offline_gemini.FROM_SCRIPT["Bash"], "opencode": "bash"}.items():  # fmt: skip
        shell = shells[name]
        assert shell is not None and shell.name == tool and shell.command_field, name
    assert offline_chat.NEUTRAL_NAMES["bash"] == "Bash"  # opencode's `bash` is Chat Completions' neutral name
    assert shells["codex"] is not None and shells["codex"].in_hooks == "Bash"  # its hooks say Bash
