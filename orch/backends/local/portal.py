"""A sandboxed worker's first process: `python -S portal.py HOST:PORT SOCKET [HOST:PORT SOCKET]... -- ARGV...`.

Inside a local strict sandbox (orch.backends.local.bwrap) there is no network: this listens on the gateway's own
loopback address, so the worker's base URL stays as it is, and copies every connection to SOCKET, the
worker's own way to the gateway (orch.backends.local.relay on the host); a second pair, when the run allows egress,
is its proxy's port and socket (orch.backends.local.egressproxy). The listener is bound before ARGV starts,
then served by a child in a session of its own (a Ctrl-C for the agent does not reach it), and ARGV
replaces this process. Standard library only: it starts before every agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import Awaitable, Callable

CHUNK = 1 << 16


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            writer.close()


async def splice(
    connect: Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]],
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    """One connection copied both ways to what `connect` opens (the relay's and the portal's shared work)."""
    try:
        up_reader, up_writer = await connect
    except OSError:
        writer.close()
        return
    await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def _serve(listeners: list[tuple[socket.socket, str]]) -> None:
    def one(target: str) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        async def copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await splice(asyncio.open_unix_connection(target), reader, writer)

        return copy

    servers = [await asyncio.start_server(one(target), sock=listener) for listener, target in listeners]
    await asyncio.gather(*(server.serve_forever() for server in servers))


def main(argv: list[str]) -> int:
    pairs = argv[: argv.index("--")] if "--" in argv else []
    command = argv[len(pairs) + 1 :]
    if not pairs or len(pairs) % 2 or not command or not all(":" in a for a in pairs[::2]):
        print("usage: portal.py HOST:PORT SOCKET [HOST:PORT SOCKET]... -- ARGV...", file=sys.stderr)
        return 2
    listeners = []
    for address, target in zip(pairs[::2], pairs[1::2], strict=True):
        host, _, port = address.rpartition(":")
        listeners.append((socket.create_server((host, int(port)), reuse_port=False), target))
    if os.fork() == 0:
        os.setsid()
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_serve(listeners))
        os._exit(0)
    for listener, _ in listeners:
        listener.close()
    os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
