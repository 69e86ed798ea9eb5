"""The shared suite every registered agent adapter runs: it keeps the AgentAdapter contract, states complete
facts and prepares a worker the same way; nothing outside orch/agents/ reaches an adapter but through the
registry. A toy seventh agent (tests/agents/toy_agent.py) is registered for the whole suite: adding an agent
is its module and one registry line."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import orch
from orch.agents import installs
from orch.agents.base import AgentBase
from orch.agents.registry import ADAPTERS, DEFAULT_AGENT, IMAGE_AGENT, get_adapter, image_install, image_installs
from orch.backends.docker.image import DOCKER_DIR, build_args
from orch.container.serverun import link_sessions
from orch.contracts import (
    TEXT_SHELL,
    AgentAdapter,
    AgentFacts,
    Check,
    ImageInstall,
    LaunchSpec,
    SessionStore,
    WorkerContext,
)
from orch.errors import UsageError
from orch.fleet import launch
from orch.gateway.apis import registry as protocols
from orch.gateway.modeldir import Scheme
from orch.modelaccess import Credentials, GatewayEnv, LoginFile
from orch.offline.apis import gemini as offline_gemini
from orch.offline.apis import openai_chat as offline_chat
from orch.offline.apis import openai_responses as offline_responses
from orch.run.folder import RunFolder
from orch.settings.compose import RUN
from orch.settings.internal import WORKER
from orch.versions import AIDER_VERSION, DEFAULT_BASE_IMAGE, OPENCODE_VERSION
from tests.helpers import run_info, stand_in_binaries

PACKAGE = Path(orch.__file__).parent
ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
TOY = "toy"
NAMES = sorted([*ADAPTERS, TOY])
"""Every registered agent, and the toy one the suite registers."""


@pytest.fixture(autouse=True)
def toy_registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Register the toy agent the way orch/agents/registry.py names its own: a module and its class."""
    monkeypatch.setitem(ADAPTERS, TOY, "tests.agents.toy_agent:ToyAdapter")
    yield


@pytest.mark.parametrize("name", NAMES)
def test_adapter_keeps_the_contract(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in_binaries(monkeypatch)  # doctor's lines are Checks whatever `--version` says
    adapter = get_adapter(name)
    assert isinstance(adapter, AgentAdapter)
    assert adapter.facts.name == name
    assert adapter.facts.default_permission_mode in adapter.facts.permission_modes
    assert all(isinstance(d.keys, tuple) and d.keys for d in adapter.facts.dialogs)
    assert all(isinstance(check, Check) for check in adapter.doctor())
    assert isinstance(adapter.facts, AgentFacts)  # its facts: one frozen object


@pytest.mark.parametrize("name", NAMES)
def test_adapter_states_complete_facts(name: str) -> None:
    adapter = get_adapter(name)
    creds = adapter.facts.credentials
    assert isinstance(creds, Credentials)
    assert all(ENV_NAME.match(var) for var in creds.variables)
    if creds.env:  # it calls a real model API: where, how to get a key, how the gateway presents each one
        assert creds.api_host and creds.base_url_env and creds.hint
        assert {var for var, _ in creds.schemes} == set(creds.env)
        assert all(Scheme(scheme) for _, scheme in creds.schemes)
        # The gateway protocols it speaks: its upstream serves these and refuses every other API's calls.
        assert creds.protocols and set(creds.protocols) <= set(protocols.BY_NAME)
        assert isinstance(adapter.facts.gateway, GatewayEnv)
        # A worker's environment drops `variables`, then gets these two: they must be among them.
        assert adapter.facts.gateway.key_env in creds.env and adapter.facts.gateway.base_url_env == creds.base_url_env
    else:
        assert adapter.facts.gateway is None and creds.login is None
    if creds.login is not None:
        assert isinstance(creds.login, LoginFile) and ENV_NAME.match(creds.login.dir_env)
        assert not Path(creds.login.in_home).is_absolute() and ".." not in Path(creds.login.in_home).parts
    if adapter.facts.sessions is not None:
        assert isinstance(adapter.facts.sessions, SessionStore)
        sub = Path(adapter.facts.sessions.subdir)
        assert adapter.facts.sessions.subdir and not sub.is_absolute() and ".." not in sub.parts
    if adapter.facts.install is not None:
        assert isinstance(adapter.facts.install, ImageInstall)
        assert adapter.facts.install.package and re.match(r"^\d+\.\d+\.\d+", adapter.facts.install.version)
        assert ENV_NAME.match(adapter.facts.install.build_arg)
        # A pip command is one word (the image links /opt/pip/bin/<command>); config packages are pinned.
        assert adapter.facts.install.pip_command is None or re.fullmatch(
            r"[a-z][a-z0-9_-]*", adapter.facts.install.pip_command
        )
        assert adapter.facts.install.config_npm is None or re.fullmatch(
            r"\S+@\d+\.\d+\.\d+", adapter.facts.install.config_npm
        )


def test_the_image_build_reads_its_agent_from_the_adapter() -> None:
    install = image_install()
    assert install == get_adapter(IMAGE_AGENT).facts.install
    dockerfile = (DOCKER_DIR / "Dockerfile").read_text()
    passed = build_args(DEFAULT_BASE_IMAGE, None, [IMAGE_AGENT])
    for arg, value in install.build_args().items():
        assert f"ARG {arg}\n" in dockerfile and "${" + arg + "}" in dockerfile
        assert f"ARG {arg}=" not in dockerfile  # no default: the pin is written in orch/versions.py only
        assert passed[arg] == value  # ... and the build always passes it
    assert "ARG BASE\n" in dockerfile and passed["BASE"] == DEFAULT_BASE_IMAGE
    assert get_adapter(DEFAULT_AGENT).facts.name == DEFAULT_AGENT


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


@pytest.mark.parametrize("name", NAMES)
def test_worker_environment_holds_no_credential(name: str, tmp_path: Path) -> None:
    """The tmux server's environment (every pane's) never carries the user's credential or base URL:
    those go to the gateway only, and each worker's own base URL and token come with its pane."""
    adapters = [get_adapter(kind) for kind in sorted(ADAPTERS)]
    real = {var: "real-secret" for a in adapters for var in a.facts.credentials.variables}
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


@pytest.mark.parametrize("name", NAMES)
def test_container_session_store_lives_in_the_run_folder(name: str) -> None:
    run = RunFolder.for_name("s")
    run.root.mkdir(parents=True)
    link_sessions(run, {1: name, 2: name})
    sessions = get_adapter(name).facts.sessions
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
    # The registry, and `orch setup`'s installs (which reach every adapter through it), are the way in.
    ways_in = ("__init__", "registry", "installs")
    adapter_modules = {
        ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts)
        for p in (PACKAGE / "agents").rglob("*.py")
        if p.stem not in ways_in
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
    shells = {name: get_adapter(name).facts.shell for name in sorted(ADAPTERS)}
    # No tool calls: aider runs the lines of its answers' shell blocks, which the gateway ledgers as TEXT_SHELL.
    assert shells["aider"] is not None and shells["aider"].name == TEXT_SHELL
    for name, tool in {"claude": "Bash", "scripted": "Bash", "codex": offline_responses.SHELL_TOOL,
                       "gemini": offline_gemini.FROM_SCRIPT["Bash"], "opencode": "bash"}.items():  # fmt: skip
        shell = shells[name]
        assert shell is not None and shell.name == tool and shell.command_field, name
    assert offline_chat.NEUTRAL_NAMES["bash"] == "Bash"  # opencode's `bash` is Chat Completions' neutral name
    assert shells["codex"] is not None and shells["codex"].in_hooks == "Bash"  # its hooks say Bash


def _context(run: RunFolder, name: str, workdir: Path, mode: str, token: str) -> WorkerContext:
    gateway = get_adapter(name).facts.gateway
    env = {gateway.key_env: token, gateway.base_url_env: f"http://127.0.0.1:1/t/{token}"} if gateway else {}
    return WorkerContext(
        run=run,
        worker=1,
        workers=1,
        workdir=workdir,
        config_dir=run.config_dir(1),
        permission_mode=mode,
        env=env,
        prompt="Read the brief.",
    )


@pytest.mark.parametrize("name", NAMES)
def test_prepare_seeds_its_config_dir_and_launches_in_the_workdir(name: str, tmp_path: Path) -> None:
    """Every adapter's launch runs in the worker's workdir, tells the agent which run and worker it is, and
    puts the worker's gateway token in no argv (every process on the machine can read an argv)."""
    run = RunFolder.for_name("c")
    run.create(run_info("c", workdir=str(tmp_path)))
    adapter = get_adapter(name)
    token = "orch-c-w1-secret-token"
    spec = adapter.prepare(_context(run, name, tmp_path, adapter.facts.default_permission_mode, token))
    assert isinstance(spec, LaunchSpec) and spec.argv and spec.cwd == tmp_path
    assert spec.env[RUN.name] == str(run.root) and spec.env[WORKER.name] == "1"
    assert run.config_dir(1).is_dir()
    assert not any(token in arg for arg in spec.argv)
    assert token not in "".join(spec.env.values())  # the token comes with the pane, not the launch spec


@pytest.mark.parametrize("name", NAMES)
def test_a_ready_marker_of_the_last_life_is_gone_when_the_worker_is_prepared_again(name: str, tmp_path: Path) -> None:
    """A restart waits for the marker (`orch restart`): one left by the killed life would read as booted."""
    run = RunFolder.for_name("r")
    run.create(run_info("r", workdir=str(tmp_path)))
    adapter = get_adapter(name)
    marker = adapter.ready_marker(run, 1)
    if marker is None:
        pytest.skip(f"{name} has no ready marker: its SessionStart is enough")
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("{}")
    adapter.prepare(_context(run, name, tmp_path, adapter.facts.default_permission_mode, "t"))
    assert not marker.exists()


@pytest.mark.parametrize("name", NAMES)
def test_prepare_refuses_an_unknown_permission_mode_before_writing(name: str, tmp_path: Path) -> None:
    run = RunFolder.for_name("m")
    run.create(run_info("m", workdir=str(tmp_path)))
    with pytest.raises(UsageError, match="unknown permission mode"):
        get_adapter(name).prepare(_context(run, name, tmp_path, "no-such-mode", "t"))
    assert not run.config_dir(1).exists()


def test_a_registered_agent_reaches_every_caller_through_the_registry() -> None:
    """The toy agent is its module plus one registry line: orch finds it, checks its modes, and the image
    build would carry it."""
    toy = get_adapter(TOY)
    assert isinstance(toy, AgentBase) and type(toy).__module__ == "tests.agents.toy_agent"
    assert toy.facts.credentials.protocols == ("openai-chat",)
    assert image_installs([TOY]) == {TOY: toy.facts.install}
    assert TOY in image_installs(["all"])
    with pytest.raises(UsageError, match="unknown agent"):
        get_adapter("toy2")
    # `orch setup` installs it from its facts: no line of orch names an agent's install.
    (toy_install,) = installs.plan([TOY])
    assert (toy_install.prefix, toy_install.spec, toy_install.command) == (
        toy.facts.cache_root,
        "toy-agent@1.2.3",
        "sh",
    )


def test_the_setup_installs_every_agent_from_its_facts_and_refuses_an_unknown_one() -> None:
    planned = installs.plan(["all"])
    facts = [a.facts for a in map(get_adapter, ADAPTERS) if isinstance(a, AgentBase) and a.facts.install]
    assert [item.prefix for item in planned] == [f.cache_root for f in facts]
    (aider,) = [item for item in planned if item.agent == "aider"]
    assert aider.pip and aider.spec == f"aider-chat=={AIDER_VERSION}" and aider.command == "aider"
    (opencode,) = [item for item in planned if item.agent == "opencode"]
    assert opencode.config_npm == f"@opencode-ai/plugin@{OPENCODE_VERSION}"
    assert all(item.size_mb > 0 for item in planned if item.agent != TOY)  # `orch setup` says each size
    assert installs.plan(["scripted"]) == []  # nothing to install
    with pytest.raises(UsageError, match="unknown agent 'nope'"):
        installs.plan(["claude", "nope"])


@pytest.mark.parametrize("name", [n for n in NAMES if n != "scripted"])
def test_each_agent_with_a_binary_has_its_bin_setting(name: str) -> None:
    """ORCH_<NAME>_BIN is found by the agent's name; its default in docs/settings.md names the folder `orch setup`
    installs to."""
    adapter = get_adapter(name)
    setting = adapter.facts.bin_setting
    if name == TOY:
        assert setting is None  # a toy may have none: its binary is then found on PATH or in the cache
        return
    assert setting is not None and setting.name == f"ORCH_{name.upper()}_BIN"
    assert f"~/.cache/orch/{adapter.facts.cache_root.parent.name}/" in setting.shown
