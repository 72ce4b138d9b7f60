"""The wire format and guards of `fastcrag serve`: JSON encoding, the error shape, the API key, body limits.

With an `auth` path in langgraph.json (`access.py`), its authenticate handler checks every route but `/ok` and the
console's static files instead of the key, and the caller it returns goes with the request. Otherwise, with
`FASTRAG_API_KEY` set, every route but `/ok` and the console's static files needs `Authorization: Bearer <key>`
or `x-api-key: <key>` (compared with `hmac.compare_digest`; 401 otherwise, before any body is read or any run
starts). Request bodies are capped (`FASTRAG_MAX_BODY_BYTES`, 413). No response, log line or metric carries a
traceback, a database password or the key.
"""

from __future__ import annotations

import hmac
import logging
from typing import Any

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fastcrag.server import console
from fastcrag.server.access import ACCESS, CALLER, Access
from fastcrag.server.service import Service

log = logging.getLogger("fastcrag.server")

#: Paths anyone may fetch: liveness and the console's packaged static files (they carry no data; the console
#: sends the key with each API call it makes).
OPEN_PATHS = frozenset({"/ok", "/console", "/console/", *(f"/console/{name}" for name in console.ASSETS)})


def _default(obj: Any) -> Any:
    """JSON for what orjson does not know: pydantic models (LangChain messages), named tuples, sets, exceptions."""
    if hasattr(obj, "model_dump") and not isinstance(obj, type):
        return obj.model_dump()
    if hasattr(obj, "_asdict") and not isinstance(obj, type):
        return obj._asdict()
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    if isinstance(obj, BaseException):
        return {"error": type(obj).__name__}
    return str(obj)


def dumps(value: Any) -> bytes:
    """Serialize a response value (orjson, LangChain messages as their dicts)."""
    return orjson.dumps(value, default=_default, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)


class OrjsonResponse(JSONResponse):
    """A JSON response rendered with `dumps`."""

    def render(self, content: Any) -> bytes:
        """Encode the body."""
        return dumps(content)


def error(status: int, detail: str, headers: dict[str, str] | None = None) -> Response:
    """The error shape of the LangGraph server API: `{"detail": ...}`."""
    return OrjsonResponse({"detail": detail}, status_code=status, headers=headers)


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's handler for an `HTTPException`: the error shape with the exception's status and headers."""
    assert isinstance(exc, HTTPException)
    return error(exc.status_code, str(exc.detail), dict(exc.headers or {}))


async def read_json(request: Request, limit: int) -> dict[str, Any]:
    """The request's JSON object, read up to `limit` bytes.

    Raises:
        HTTPException: 413 for a larger body, 422 for a body that is not a JSON object.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, f"request body larger than {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise HTTPException(413, f"request body larger than {limit} bytes")
    if not body.strip():
        return {}
    try:
        value = orjson.loads(bytes(body))
    except orjson.JSONDecodeError:
        raise HTTPException(422, "the request body is not valid JSON") from None
    if not isinstance(value, dict):
        raise HTTPException(422, "the request body must be a JSON object")
    return value


def sse(event: str, data: Any, service: Service | None = None) -> bytes:
    """One server-sent event (its data scrubbed of secrets when `service` is given)."""
    body = dumps(data) if service is None else service.scrub(dumps(data))
    return b"event: " + event.encode() + b"\ndata: " + body + b"\n\n"


class Guard:
    """Outermost ASGI layer: the caller's authentication, and no traceback ever reaching a client or the log."""

    def __init__(self, app: ASGIApp, key: str | None, access: Access | None = None) -> None:
        """Wrap `app`, authenticating with `access` (an `Auth` object's handlers) or else the shared `key`.

        Neither (`key` None or empty): no check (loopback only, enforced by `serve`).
        """
        self.app = app
        self.key = key.encode() if key else None
        self.access = access

    def _authorized(self, scope: Scope) -> bool:
        if self.key is None or scope["path"] in OPEN_PATHS:
            return True
        given: bytes | None = None
        for name, value in scope.get("headers", []):
            if name == b"authorization" and value[:7].lower() == b"bearer ":
                given = value[7:].strip()
            elif name == b"x-api-key" and given is None:
                given = value.strip()
        return given is not None and hmac.compare_digest(given, self.key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the key, then run the app; an unexpected error becomes a 500 with one redacted log line."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.access is not None:
            if scope["path"] not in OPEN_PATHS:
                try:
                    scope[CALLER] = await self.access.authenticate(scope)
                except HTTPException as exc:
                    await error(exc.status_code, str(exc.detail), dict(exc.headers or {}))(scope, receive, send)
                    return
                scope[ACCESS] = self.access
        elif not self._authorized(scope):
            response = error(
                401, "missing or wrong API key: send `Authorization: Bearer <key>`", {"WWW-Authenticate": "Bearer"}
            )
            await response(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:
            service = scope.get("state", {}).get("service")
            reason = service.reason(exc) if isinstance(service, Service) else type(exc).__name__
            log.error("%s %s failed: %s", scope.get("method"), scope.get("path"), reason)
            if not started:
                await error(500, f"internal error: {reason}")(scope, receive, send)
