"""One reading of an OpenAI request, shared by the gateway, the endpoint picker and tests.

The fronts only adapt transport (HTTP/1.1 bytes, ext_proc messages) and read here:

- ``body``: the request body (model, stream, ``stream_options``, output limit, prompt under
  the token rule, user) or the 400 naming the field at fault;
- ``stream``: an upstream's SSE stream cut into events, its output tokens counted, its usage
  read, and whether it ended whole;
- ``client``: the client's address behind trusted proxies.

Imports: the engine's value types (``trafficmgr.routing``) and msgspec only.
"""

from __future__ import annotations

from trafficmgr.requestpath.reading.body import (
    MAX_OUTPUT_TOKENS,
    OpenAIRequest,
    chat_of_path,
    read_request,
    with_model,
)
from trafficmgr.requestpath.reading.client import (
    IpNetwork,
    client_address,
    forwarded_client,
    networks,
)
from trafficmgr.requestpath.reading.stream import (
    BrokenStream,
    StreamReader,
    error_event,
    usage_of,
    whole_usage,
)

__all__ = [
    "MAX_OUTPUT_TOKENS",
    "BrokenStream",
    "IpNetwork",
    "OpenAIRequest",
    "StreamReader",
    "chat_of_path",
    "client_address",
    "error_event",
    "forwarded_client",
    "networks",
    "read_request",
    "usage_of",
    "whole_usage",
    "with_model",
]
