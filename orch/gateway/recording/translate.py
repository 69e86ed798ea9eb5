"""A recorded answer in this run's folders instead of the recording's (a recorded Write into the old workdir
would otherwise write there): replay hands every answer through `translate`. Only the response changes,
the request stays as recorded; a stream is rewritten by its API (ApiProtocol.translate_stream), every line
it does not change byte for byte."""

from __future__ import annotations

import functools

from orch.gateway.apis.base import rewrite_json
from orch.gateway.apis.registry import for_request
from orch.gateway.modeldir import Exchange
from orch.gateway.recording.normalise import Folders, replace_folders


def translate(exchange: Exchange, pairs: Folders) -> Exchange:
    """`exchange` answering in the folders `pairs` name (recorded folder, this run's folder)."""
    if not pairs:
        return exchange
    rewrite = functools.partial(replace_folders, pairs=pairs)
    if exchange.stream or exchange.headers.get("content-type", "").startswith("text/event-stream"):
        body = for_request(exchange.path).translate_stream(exchange.body, rewrite)
    else:
        body = rewrite_json(exchange.body, rewrite) or replace_folders(exchange.body, pairs)
    return exchange if body == exchange.body else exchange.model_copy(update={"body": body})
