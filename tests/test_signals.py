"""Signals held off while a block runs whole (orch.signals), sent for real to a child Python process."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading

from orch.signals import held


def child(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=60, check=False
    )


def test_a_hang_up_in_the_block_ends_the_process_only_after_the_block() -> None:
    done = child("""
        import os, signal
        from orch.signals import held
        with held():
            os.kill(os.getpid(), signal.SIGHUP)  # delivered at once, to this very thread
            os.kill(os.getpid(), signal.SIGTERM)
            print("the block ran whole", flush=True)
        print("never", flush=True)
    """)
    assert done.stdout == "the block ran whole\n", done.stderr
    assert done.returncode == -signal.SIGHUP  # acted on as before: the default's, the first that came


def test_ctrl_c_held_in_nested_blocks_is_one_keyboard_interrupt_after_both() -> None:
    done = child("""
        import os, signal
        from orch.signals import held
        try:
            with held((signal.SIGINT,)):
                with held((signal.SIGINT,)):
                    os.kill(os.getpid(), signal.SIGINT)
                    os.kill(os.getpid(), signal.SIGINT)
                    print("inner", flush=True)
                print("outer", flush=True)
        except KeyboardInterrupt:
            print("interrupted", signal.getsignal(signal.SIGINT) is signal.default_int_handler, flush=True)
    """)
    assert done.stdout.split("\n") == ["inner", "outer", "interrupted True", ""], done.stderr
    assert done.returncode == 0


def test_off_the_main_thread_the_block_runs_as_it_is() -> None:
    ran: list[str] = []
    before = signal.getsignal(signal.SIGHUP)

    def block() -> None:
        with held():  # no handler can be set here: nothing is
            ran.append("ran")

    thread = threading.Thread(target=block)
    thread.start()
    thread.join()
    assert ran == ["ran"] and signal.getsignal(signal.SIGHUP) is before
