"""One connection copied both ways to another, on an asyncio loop: the relay's (a sandbox's gateway and hook
sockets) and the egress proxy's work. (Inside a sandbox the portal does the same with threads: it starts
before every agent, and asyncio's import alone cost four times the rest of it.)"""

from __future__ import annotations

import asyncio
import contextlib
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
    """One connection copied both ways to what `connect` opens."""
    try:
        up_reader, up_writer = await connect
    except OSError:
        writer.close()
        return
    await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
