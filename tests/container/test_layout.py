"""Where a run lives in Docker: the container's user for a workdir."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orch.container.layout import ROOT_HOST_UID, container_user, writable_by

pytestmark = pytest.mark.pure  # starts nothing: no process, no engine, no connection


def test_container_user(tmp_path: Path) -> None:
    # A non-root user runs the container as themself.
    assert container_user(tmp_path, copy=False, uid=1234, gid=99) == (1234, 99)
    # Root: the workdir's owner when that is not root, else 1000:1000; never 0.
    if os.getuid() == 0:
        os.chown(tmp_path, 0, 0)
        assert container_user(tmp_path, copy=False, uid=0, gid=0) == (ROOT_HOST_UID, ROOT_HOST_UID)
        os.chown(tmp_path, 2001, 2002)
        assert container_user(tmp_path, copy=False, uid=0, gid=0) == (2001, 2002)
        assert container_user(tmp_path, copy=True, uid=0, gid=0) == (ROOT_HOST_UID, ROOT_HOST_UID)
        assert writable_by(tmp_path, 2001, 2002) and not writable_by(tmp_path, 3000, 3000)
