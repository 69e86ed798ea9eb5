"""The container init's boot: from compose's environment, the secret file, credentials cleared."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orch.settings.compose import OFFLINE, RUN

pytestmark = pytest.mark.pure  # starts nothing: no process, no engine, no connection

CANARY = "sk-ant-api03-CANARY-compose-0123456789abcdef"


def test_compose_boot_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """compose.yaml (no boot line): the init's gateway gets an upstream for each credential set, the scripted
    model when offline, nothing to hold without either; a bad run name is refused."""
    from orch.container.bootline import InitError, env_boot

    monkeypatch.delenv(RUN.name, raising=False)
    assert env_boot({"ANTHROPIC_API_KEY": CANARY}) is None  # not compose: no ORCH_RUN
    monkeypatch.setenv(RUN.name, "demo")
    monkeypatch.setenv(OFFLINE.name, "0")
    boot = env_boot({"ANTHROPIC_API_KEY": CANARY, "OPENAI_API_KEY": "sk-openai-x"})
    assert boot is not None and boot.run == "demo" and not boot.offline
    secrets = {u.secret.get_secret_value() for u in boot.upstreams}
    assert CANARY in secrets and "sk-openai-x" in secrets
    assert env_boot({"ANTHROPIC_API_KEY": ""}) is None
    monkeypatch.setenv(OFFLINE.name, "1")
    offline = env_boot({"ANTHROPIC_API_KEY": CANARY})
    assert offline is not None and [u.kind for u in offline.upstreams] == ["scripted"]
    monkeypatch.setenv(RUN.name, "../etc")
    with pytest.raises(InitError, match=RUN.name):
        env_boot({})


def test_compose_init_clears_every_credential_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from orch.container.bootline import clear_credentials

    names = ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY")
    for name in names:
        monkeypatch.setenv(name, CANARY)
    clear_credentials()
    assert not [name for name in names if name in os.environ]


def test_compose_secret_file_is_read_only_when_the_run_cannot_read_it(tmp_path: Path) -> None:
    """ORCH_CREDENTIALS: `VAR=value` lines of credential variables; refused when the run's uid could read
    it or a line is not one, the error never echoing a value; /dev/null (compose's default) or none: nothing."""
    from orch.container.bootline import InitError, read_secrets

    secret = tmp_path / "orch.env"
    secret.write_text(f"# mine\n\nexport ANTHROPIC_API_KEY='{CANARY}'\nANTHROPIC_BASE_URL=https://x.example\n")
    secret.chmod(0o600)
    owner = secret.stat().st_uid
    other = owner + 1
    assert read_secrets(secret, other) == {"ANTHROPIC_API_KEY": CANARY, "ANTHROPIC_BASE_URL": "https://x.example"}
    with pytest.raises(InitError, match="could read it") as owned:
        read_secrets(secret, owner)
    secret.chmod(0o640)
    with pytest.raises(InitError, match="mode 640"):
        read_secrets(secret, other)
    secret.chmod(0o600)
    secret.write_text(f"PATH={CANARY}\n")
    with pytest.raises(InitError, match="line 1: expected VAR=value") as bad:
        read_secrets(secret, other)
    assert CANARY not in str(bad.value) + str(owned.value)
    assert read_secrets(Path("/dev/null"), other) == {} and read_secrets(tmp_path / "none", other) == {}


def test_a_boot_file_is_read_only_when_the_run_cannot_read_it(tmp_path: Path) -> None:
    """A swarm task's boot comes as a secret file the gateway's uid owns, mode 400: one the run's uid owns, or
    that anyone else may read, is refused without echoing it; a bad line is named by its field only."""
    from orch.container.bootline import InitError, read_boot_file

    boot = tmp_path / "orch-boot"
    line = f'{{"run": "demo", "upstreams": [{{"kind": "api", "url": "https://api.example", "secret": "{CANARY}"}}]}}\n'
    boot.write_text(line)
    me = os.getuid()
    os.chmod(boot, 0o400)
    with pytest.raises(InitError, match="could read it") as owned:
        read_boot_file(boot, uid=me)
    os.chmod(boot, 0o440)
    with pytest.raises(InitError, match="mode 440") as shared:
        read_boot_file(boot, uid=me + 1)
    os.chmod(boot, 0o400)
    got = read_boot_file(boot, uid=me + 1)
    assert got.run == "demo" and got.upstreams[0].secret.get_secret_value() == CANARY
    boot.write_text('{"run": "demo", "upstreams": "' + CANARY + '"}')
    with pytest.raises(InitError, match="bad boot line: upstreams") as bad:
        read_boot_file(boot, uid=me + 1)
    with pytest.raises(InitError, match="cannot read the boot file"):
        read_boot_file(tmp_path / "missing", uid=me + 1)
    assert not any(CANARY in str(e.value) for e in (owned, shared, bad))
