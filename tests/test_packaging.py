"""`pip install` of the repository gives a working `orch`: the wheel carries orch's data (the spec's schema
and example, the role templates, the demo, the skill, the views' templates), and that `orch`, run away from
the source tree, writes a spec whose schema line points at a file it installed, and checks a machine."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
DATA = ("fleet.schema.json", "fleet.example.yaml", "roles/finder.md", "demo/fleet.yaml", "skill/SKILL.md")


def backend_missing() -> str | None:
    """Why this venv cannot build orch's wheel without isolation: its build backend older than pyproject.toml's
    [build-system] asks (a venv made by scripts/setup.sh alone, which installs no dev extras), or None."""
    for line in tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]:
        need = Requirement(line)
        try:
            have: str | None = version(need.name)
        except PackageNotFoundError:
            have = None
        if have is None or not need.specifier.contains(have, prereleases=True):
            return (
                f"{need.name} {have or 'is missing'} in {sys.prefix}, and orch's build needs {need}: "
                "run `.venv/bin/pip install -e '.[dev]'` (scripts/test.sh does)"
            )
    return None


def test_the_installed_package_works_without_the_source_tree(tmp_path: Path) -> None:
    missing = backend_missing()
    assert missing is None, missing
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    # The wheel `pip install .` builds, with the venv's setuptools (the dev extras') instead of a fresh one in
    # an isolated build environment: seconds rather than half a minute.
    build = [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(REPO)]
    subprocess.run(build, check=True, timeout=600)
    (wheel,) = (tmp_path / "dist").glob("orch-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert all(f"orch/data/{name}" in names for name in DATA), [n for n in names if "/data/" in n][:20]
    target = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True, timeout=300)
    away = tmp_path / "elsewhere"
    away.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target), "ORCH_HOME": str(tmp_path / "home")}

    def orch(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-c", "import sys; from orch.cli.main import main; main()", *args]
        return subprocess.run(argv, cwd=away, env=env, capture_output=True, text=True, timeout=120)

    assert orch("--version").stdout.startswith("orch ")
    assert orch("spec", "init", "fleet.yaml").returncode == 0
    first = (away / "fleet.yaml").read_text().splitlines()[0]
    schema = Path(first.split("$schema=", 1)[1])
    assert schema.is_file() and schema.is_relative_to(target), first  # the installed package's, not the tree's
    assert orch("setup", "--agents", "scripted").stdout == "setup: nothing to install for scripted\n"
