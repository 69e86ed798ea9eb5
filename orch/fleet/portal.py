"""A sandboxed worker's first process: `python -S portal.py HOST:PORT SOCKET -- ARGV...`.

Inside a local strict sandbox (orch.fleet.bwrap) there is no network: this listens on the gateway's own
loopback address, so the worker's base URL stays as it is, and copies every connection to SOCKET, the
worker's own way to the gateway (orch.fleet.relay on the host). The listener is bound before ARGV starts,
then served by a child in a session of its own (a Ctrl-C for the agent does not reach it), and ARGV
replaces this process. Standard library only: it starts before every agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import Awaitable

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


async def _serve(listener: socket.socket, target: str) -> None:
    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await splice(asyncio.open_unix_connection(target), reader, writer)

    server = await asyncio.start_server(one, sock=listener)
    await server.serve_forever()


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--" or ":" not in argv[0]:
        print("usage: portal.py HOST:PORT SOCKET -- ARGV...", file=sys.stderr)
        return 2
    host, _, port = argv[0].rpartition(":")
    listener = socket.create_server((host, int(port)), reuse_port=False)
    if os.fork() == 0:
        os.setsid()
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_serve(listener, argv[1]))
        os._exit(0)
    listener.close()
    os.execvp(argv[3], argv[3:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
