"""Who is who under strict isolation, and the privileges a container's init gives up for good."""

from __future__ import annotations

import subprocess
import sys

from orch.run import uids


def test_no_new_privs_holds_for_the_process_and_what_it_starts() -> None:
    """The init's first step where the engine cannot set it (a swarm task): the process and its children
    can never gain a privilege by exec again."""
    code = "import subprocess; from orch.run.uids import no_new_privs; no_new_privs(); subprocess.run(['cat', STATUS])"
    code = code.replace("STATUS", repr("/proc/self/status"))
    status = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "NoNewPrivs:\t1" in status


def test_drop_argv_keeps_only_what_it_names() -> None:
    argv = uids.drop_argv(1000, 1000, (*uids.SWITCH_CAPS, uids.READ_ALL))
    assert "--inh-caps=-all,+setuid,+setgid,+setpcap,+dac_read_search" in argv
    assert "--no-new-privs" in argv and argv[-1] == "--"
