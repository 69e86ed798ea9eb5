"""model/gateway.jsonl: the gateway's GatewayEvent lines (also logged on stderr, without secrets)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from orch.gateway.modeldir import GatewayEvent, GatewayEventKind
from orch.run.files import append_line

log = logging.getLogger("orch.gateway")


class EventLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    def emit(self, kind: GatewayEventKind, worker: int | None = None, **data: Any) -> GatewayEvent:
        event = GatewayEvent(ts=time.time(), event=kind, worker=worker, data=data)
        append_line(self.path, event.model_dump_json())
        log.info("%s worker=%s %s", kind.value, worker, data)
        return event
