"""The `orch` entry point. It stays light: the typer app (orch.cli.commands) is loaded only when a
command needs it, so `orch bus post`, which workers run many times, starts without typer, tmux or docker.
"""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:3] == ["bus", "post"]:  # a strict worker's post, before anything else is imported
        from orch.run.workerpost import main as worker_post

        code = worker_post(sys.argv[3:])
        if code is not None:
            raise SystemExit(code)
    import logging

    from orch.errors import OrchError
    from orch.settings.user import LOG_LEVEL

    try:
        level = LOG_LEVEL.get()
    except OrchError as exc:  # before typer: said as orch.cli.commands.OrchGroup says it
        print(f"orch: error: {exc.one_line()}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None
    logging.basicConfig(level=level, format="orch: %(message)s")
    if sys.argv[1:3] == ["bus", "post"]:
        from orch.cli.bus.post import fast_main

        code = fast_main(sys.argv[3:])
        if code is not None:
            raise SystemExit(code)
    if sys.argv[1:2] == ["offline-verdict"]:  # the offline verifier's last step (orch.lead.verdictwriter)
        from orch.lead.verdictwriter import main as write_verdict

        raise SystemExit(write_verdict(sys.argv[2:]))
    from orch.cli.commands import app

    app()
