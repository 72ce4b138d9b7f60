"""Server-sent events read off an HTTP response, for the tests that stream from a server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx


def sse_events(resp: httpx.Response) -> Iterator[tuple[str, Any]]:
    """Each (event, data) of a streamed response; data is the JSON of the event's `data:` lines (None without)."""
    event, data = "", []
    for line in resp.iter_lines():
        if line.startswith("event:"):
            event = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data.append(line.removeprefix("data:").strip())
        elif not line and event:
            yield event, json.loads("\n".join(data)) if data else None
            event, data = "", []
