"""Signals held off while a block runs whole (orch.signals), sent for real to a child Python process."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading

from orch.signals import held, terminate


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


def test_terminate_waits_for_the_exit_not_for_what_the_process_lets_go_first() -> None:
    """A process that lets go of what it served (here: says so) and then takes its time to exit (a relay joining
    its threads) is waited for; one that ignores SIGTERM is killed; a zombie child has exited."""
    slow = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import signal, sys, time
            def bye(*_):
                print("let go", flush=True)
                time.sleep(0.5)  # a slow exit: what this test is about, not a wait for something
                sys.exit(0)
            signal.signal(signal.SIGTERM, bye)
            print("up", flush=True)
            signal.pause()
        """)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    stubborn = subprocess.Popen(
        [sys.executable, "-c", "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); "
         "signal.pause()"], stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert slow.stdout is not None and slow.stdout.readline() == "up\n"
        assert stubborn.stdout is not None and stubborn.stdout.readline() == "up\n"
        terminate(slow.pid, 30, "the slow one")
        assert slow.stdout.readline() == "let go\n" and slow.wait(0) == 0  # exited: a zombie until reaped here
        terminate(stubborn.pid, 1, "the stubborn one")
        assert stubborn.wait(0) == -signal.SIGKILL
        terminate(stubborn.pid, 1, "the stubborn one")  # gone already: nothing to do
    finally:
        for proc in (slow, stubborn):
            proc.kill()
            proc.wait()
