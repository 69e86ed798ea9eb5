"""`python -m orch.gateway --handle FILE [--ready-fd N]`: one GatewayBoot JSON line on stdin, then serve until
SIGTERM.

Writes {"url", "pid"} to FILE (0600) once serving, then `ready` to the pipe N if given (its starter waits on
it: a line, or EOF if this process died first). Bad input is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from pydantic import ValidationError

from orch.errors import OrchError
from orch.gateway.modeldir import GatewayBoot
from orch.gateway.supervisor import Supervisor
from orch.settings.user import LOG_LEVEL
from orch.text import first_error


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orch.gateway", description=__doc__.splitlines()[0])
    parser.add_argument("--handle", type=Path, required=True, help="where to write the gateway's url and pid")
    parser.add_argument("--ready-fd", type=int, help="a pipe to write `ready` to once the handle is written")
    args = parser.parse_args(argv)
    logging.basicConfig(level=LOG_LEVEL.get(), format="orch gateway[%(process)d]: %(message)s")
    try:
        boot = GatewayBoot.model_validate_json(sys.stdin.readline())
    except ValidationError as exc:
        print(f"orch gateway: bad boot line: {first_error(exc, 'the line')}", file=sys.stderr)
        return 2
    if not boot.upstreams and boot.replay is None:
        print("orch gateway: bad boot line: needs an upstream or a replay cassette", file=sys.stderr)
        return 2
    try:
        return Supervisor(boot, args.handle, args.ready_fd).run()
    except OrchError as exc:
        print(f"orch gateway: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
