"""Per-user access for `fastcrag serve`: the `langgraph_sdk.Auth` object that langgraph.json names, run as LangGraph.

langgraph.json's `"auth": {"path": "./auth.py:auth"}` names an `Auth` object (a file path relative to langgraph.json,
or `module:attribute`). `fastcrag serve` then runs, as LangGraph's server does:

- its `@auth.authenticate` handler on every request but the health routes (`wire.OPEN_PATHS`): the credentials it
  accepts become the caller (`Caller`); `Auth.exceptions.HTTPException` keeps its status (401 for a bad or missing
  token), and any other exception it raises is a 401 too (it could not authenticate the request), logged as one
  redacted line;
- its `@auth.on...` handlers (the most specific of resource.action, resource, action, global) before each
  operation: they may change the value (on create, add metadata such as the owner), refuse (False: 403) or return a
  filter (`Filter`), which the thread records apply in SQL (`records.Dialect.where`) and the one assistant here.

A handler that raises `Auth.exceptions.HTTPException` answers with its status and detail; an `AssertionError` is a 403
(as LangGraph); anything else is a 500 naming the handler and the exception's type, with no traceback and no message
in the response (the log line carries the message, with the caller's credentials and the configured secrets
replaced by `***`).
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import inspect
import json
import logging
import sys
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection, Request
from starlette.types import Scope

log = logging.getLogger("fastcrag.server")

Fields = dict[str, Any]
"""A user's fields."""
Filter = dict[str, Any]
"""What an `@auth.on` handler returns to narrow an operation: `{key: value}`, `{key: {"$eq": v}}`,
`{key: {"$contains": v or [v, ...]}}`, combined with AND, and `{"$or": [f, f, ...]}` / `{"$and": [...]}`."""
OPERATORS = ("$eq", "$contains")
MAX_NESTING = 2
"""How deep `$or` / `$and` may nest (LangGraph's limit)."""
CALLER = "fastcrag.caller"
"""The ASGI scope key of the authenticated `Caller`."""
ACCESS = "fastcrag.access"
"""The ASGI scope key of the worker's `Access`."""
AUTH_PARAMS = ("request", "path", "method", "path_params", "query_params", "headers", "authorization", "scope")
"""The parameters an `@auth.authenticate` handler may ask for by name."""
CREDENTIAL_HEADERS = (b"authorization", b"x-api-key", b"cookie")
"""Headers whose values never reach a log line."""


class AuthLoadError(Exception):
    """The `auth` path of langgraph.json names nothing usable (the message says why, in one line)."""


class FilterError(ValueError):
    """An auth handler returned a filter this server cannot apply."""


def auth_spec(config_file: Path) -> str | None:
    """The `auth.path` that langgraph.json names, with a file path made absolute (None when there is none).

    Raises:
        AuthLoadError: the file is not JSON, or `auth` is not an object with a `path` string.
    """
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise AuthLoadError(f"{config_file}: cannot read it as JSON ({type(exc).__name__}: {exc})") from None
    auth = config.get("auth") if isinstance(config, dict) else None
    if auth is None or (isinstance(auth, dict) and auth.get("path") is None):
        return None
    if not isinstance(auth, dict) or not isinstance(auth.get("path"), str) or ":" not in auth["path"]:
        raise AuthLoadError(f'{config_file}: `auth` must be {{"path": "./auth.py:auth"}} (a file or module, \':name\')')
    target, name = auth["path"].rsplit(":", 1)
    if "/" in target or target.endswith(".py"):
        target = str((config_file.parent / target).resolve())
    return f"{target}:{name}"


def load_auth(spec: str) -> Any:
    """The `langgraph_sdk.Auth` object at `spec` (`/abs/file.py:name` or `module:name`), with an authenticate handler.

    Raises:
        AuthLoadError: the file or module cannot be loaded, the name is missing, or it is not a usable `Auth`.
    """
    from langgraph_sdk import Auth

    target, _, name = spec.rpartition(":")
    if not target or not name:
        raise AuthLoadError(f"auth path {spec!r} must be `./file.py:name` or `module:name`")
    try:
        if "/" in target or target.endswith(".py"):
            path = Path(target)
            if not path.is_file():
                raise AuthLoadError(f"auth file {path} does not exist")
            module_name = f"fastcrag_auth_{uuid.uuid5(uuid.NAMESPACE_URL, str(path)).hex[:12]}"
            spec_ = importlib.util.spec_from_file_location(module_name, path)
            if spec_ is None or spec_.loader is None:
                raise AuthLoadError(f"auth file {path} cannot be imported")
            module = importlib.util.module_from_spec(spec_)
            sys.modules[module_name] = module
            spec_.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
    except AuthLoadError:
        raise
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise AuthLoadError(f"loading the auth file {target} failed: {type(exc).__name__}: {first}") from None
    auth = getattr(module, name, None)
    if not isinstance(auth, Auth):
        raise AuthLoadError(f"{target} has no langgraph_sdk.Auth named {name!r} (found {type(auth).__name__})")
    handler = getattr(auth, "_authenticate_handler", None)
    if handler is None:
        raise AuthLoadError(f"the Auth object {name!r} in {target} has no @auth.authenticate handler")
    unsupported = [
        p.name
        for p in inspect.signature(handler).parameters.values()
        if p.name not in AUTH_PARAMS and p.default is p.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    ]
    if unsupported:
        raise AuthLoadError(
            f"the authenticate handler asks for {', '.join(unsupported)}; it may take {', '.join(AUTH_PARAMS)}"
        )
    if not hasattr(auth, "_handlers") or not hasattr(auth, "_global_handlers"):
        raise AuthLoadError("this langgraph_sdk's Auth keeps its handlers differently: fastcrag serve cannot run it")
    return auth


class User:
    """The authenticated user as handlers and the graph see it (LangGraph's `BaseUser`).

    `identity`, `display_name`, `is_authenticated`, `permissions`, and every other field of what
    `@auth.authenticate` returned, by attribute or by key (as LangGraph's own user proxy).
    """

    def __init__(self, source: Any, permissions: tuple[str, ...]) -> None:
        """Wrap `source` (a dict or an object with `identity`)."""
        self._source = source
        self._permissions = permissions

    def _field(self, name: str, default: Any = None) -> Any:
        if isinstance(self._source, Mapping):
            return self._source.get(name, default)
        return getattr(self._source, name, default)

    @property
    def identity(self) -> str:
        """Who the user is."""
        return str(self._field("identity"))

    @property
    def display_name(self) -> str:
        """The user's name for people (the identity unless given)."""
        return str(self._field("display_name") or self.identity)

    @property
    def is_authenticated(self) -> bool:
        """True unless the handler said otherwise."""
        return bool(self._field("is_authenticated", True))

    @property
    def permissions(self) -> tuple[str, ...]:
        """The permissions the authenticate handler granted."""
        return self._permissions

    def dict(self) -> Fields:
        """Every field (the handler's own first, then the four of `BaseUser`)."""
        own = dict(self._source) if isinstance(self._source, Mapping) else {}
        return {
            **own,
            "identity": self.identity,
            "display_name": self.display_name,
            "is_authenticated": self.is_authenticated,
            "permissions": list(self.permissions),
        }

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if isinstance(self._source, Mapping):
            if name in self._source:
                return self._source[name]
            raise AttributeError(name)
        return getattr(self._source, name)

    def __getitem__(self, key: str) -> Any:
        return self.dict()[key]

    def __contains__(self, key: object) -> bool:
        return key in self.dict()

    def __iter__(self) -> Iterator[str]:
        return iter(self.dict())

    def __len__(self) -> int:
        return len(self.dict())

    def get(self, key: str, default: Any = None) -> Any:
        """A field, or `default`."""
        return self.dict().get(key, default)

    def keys(self) -> Any:
        """The fields' names."""
        return self.dict().keys()

    def items(self) -> Any:
        """The fields."""
        return self.dict().items()

    def model_dump(self, **_: Any) -> Fields:
        """The fields as JSON (a checkpoint or a response that carries the user shows only these)."""
        return {k: v for k, v in self.dict().items() if k in ("identity", "display_name", "permissions")}

    def __repr__(self) -> str:
        return f"User(identity={self.identity!r})"


def user_of(result: Any) -> User:
    """The `User` for what an authenticate handler returned.

    That is an identity string, a dict with `identity` (and `permissions`), an object with `identity`, or a
    `(permissions, user)` pair.

    Raises:
        TypeError: none of those.
    """
    permissions: Any = ()
    if isinstance(result, tuple) and len(result) == 2:
        permissions, result = result
    if isinstance(result, str):
        result = {"identity": result}
    if isinstance(result, Mapping):
        if "identity" not in result:
            raise TypeError("the authenticate handler returned a dict without `identity`")
        permissions = permissions or result.get("permissions") or ()
    elif hasattr(result, "identity"):
        permissions = permissions or getattr(result, "permissions", ()) or ()
    else:
        raise TypeError(f"the authenticate handler returned {type(result).__name__}, not a user (str, dict, object)")
    return User(result, tuple(str(p) for p in permissions))


@dataclass(frozen=True)
class Caller:
    """An authenticated request's user and permissions."""

    user: User

    @property
    def permissions(self) -> tuple[str, ...]:
        """The user's permissions."""
        return self.user.permissions

    def configurable(self) -> dict[str, Any]:
        """What a run's `config["configurable"]` carries of the caller, as LangGraph passes it to the graph."""
        return {
            "langgraph_auth_user": self.user,
            "langgraph_auth_user_id": self.user.identity,
            "langgraph_auth_permissions": list(self.permissions),
        }

    def stored(self) -> dict[str, Any]:
        """The caller as a queued background run keeps it: identity, name, permissions (never credentials)."""
        return self.user.model_dump()

    @staticmethod
    def restored(stored: Any) -> Caller | None:
        """The caller a queued run kept (None for a run queued without one)."""
        if not isinstance(stored, dict) or "identity" not in stored:
            return None
        return Caller(user_of(stored))


def caller_of(request: HTTPConnection) -> Caller | None:
    """The request's authenticated caller; None in the shared-key mode (no `auth` path)."""
    caller = request.scope.get(CALLER)
    return caller if isinstance(caller, Caller) else None


def _headers(scope: Scope) -> dict[bytes, bytes]:
    return dict(scope.get("headers", []))


def credentials_in(scope: Scope) -> list[str]:
    """The credentials a request carries (whole header values and bearer tokens), to keep out of logs."""
    found: list[str] = []
    for name, value in scope.get("headers", []):
        if name in CREDENTIAL_HEADERS and value:
            text = value.decode("latin-1")
            found.append(text)
            scheme, _, token = text.partition(" ")
            if token.strip() and scheme:
                found.append(token.strip())
    return sorted({c for c in found if len(c) >= 4}, key=len, reverse=True)


class Access:
    """Runs an `Auth` object's handlers for one worker: authenticate each request, authorize each operation."""

    def __init__(self, auth: Any, secrets: list[str] | None = None) -> None:
        """Run `auth` (a loaded `langgraph_sdk.Auth`); `secrets` never reach a log line or a response."""
        self.auth = auth
        self.secrets = list(secrets or [])
        handler = auth._authenticate_handler
        self._authenticate = handler
        self._params = {p for p in inspect.signature(handler).parameters if p in AUTH_PARAMS}
        self._async = inspect.iscoroutinefunction(handler)
        self._cache: dict[tuple[str, str], Any] = {}

    def _redact(self, text: str, scope: Scope) -> str:
        for secret in [*credentials_in(scope), *self.secrets]:
            text = text.replace(secret, "***")
        return text

    def _reason(self, exc: BaseException, scope: Scope) -> str:
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        return self._redact(f"{type(exc).__name__}: {first}" if first else type(exc).__name__, scope)

    def _arguments(self, scope: Scope) -> dict[str, Any]:
        wanted = self._params
        args: dict[str, Any] = {}
        if "request" in wanted:
            args["request"] = Request(scope)
        if "scope" in wanted:
            args["scope"] = scope
        if "path" in wanted:
            args["path"] = scope["path"]
        if "method" in wanted:
            args["method"] = scope.get("method", "GET")
        if "path_params" in wanted:
            args["path_params"] = dict(scope.get("path_params", {}))
        if "query_params" in wanted:
            from starlette.datastructures import QueryParams

            args["query_params"] = QueryParams(scope.get("query_string", b""))
        if "headers" in wanted:
            args["headers"] = _headers(scope)
        if "authorization" in wanted:
            value = _headers(scope).get(b"authorization")
            args["authorization"] = value.decode("latin-1") if value is not None else None
        return args

    async def authenticate(self, scope: Scope) -> Caller:
        """The caller of the request `scope`.

        Raises:
            HTTPException: the handler's status and detail; 401 when it raised anything else; 500 when what it
                returned is not a user.
        """
        from langgraph_sdk import Auth

        try:
            args = self._arguments(scope)
            if self._async:
                result = await self._authenticate(**args)
            else:
                result = await asyncio.to_thread(self._authenticate, **args)
        except Auth.exceptions.HTTPException as exc:
            headers = dict(exc.headers or {})
            if exc.status_code == 401:
                headers.setdefault("WWW-Authenticate", "Bearer")
            raise HTTPException(exc.status_code, self._redact(str(exc.detail), scope), headers) from None
        except Exception as exc:
            log.warning("authentication refused: the authenticate handler raised %s", self._reason(exc, scope))
            raise HTTPException(401, "authentication failed", {"WWW-Authenticate": "Bearer"}) from None
        try:
            return Caller(user_of(result))
        except TypeError as exc:
            log.error("the authenticate handler returned no user: %s", exc)
            raise HTTPException(500, f"the server's auth handler is broken: {exc}") from None

    def handler(self, resource: str, action: str) -> Any:
        """The handler for `resource.action`: the most specific registered, else the global one, else None."""
        key = (resource, action)
        if key not in self._cache:
            found = None
            for candidate in (key, (resource, "*"), ("*", action), ("*", "*")):
                handlers = self.auth._handlers.get(candidate)
                if handlers:
                    found = handlers[-1]
                    break
            if found is None and self.auth._global_handlers:
                found = self.auth._global_handlers[-1]
            self._cache[key] = found
        return self._cache[key]

    async def authorize(
        self, caller: Caller, resource: str, action: str, value: dict[str, Any], scope: Scope | None = None
    ) -> Filter | None:
        """Run the handler for `resource.action` on `value` (which it may change): its filter, or None for none.

        `scope` is the request's, whose credentials a failure's log line must not carry.

        Raises:
            HTTPException: 403 when it refuses; its own status when it raises `Auth.exceptions.HTTPException`; 500
                (one redacted log line) when it fails or returns a filter this server cannot apply.
        """
        from langgraph_sdk import Auth

        handler = self.handler(resource, action)
        if handler is None:
            return None
        ctx = Auth.types.AuthContext(
            permissions=list(caller.permissions),
            user=caller.user,
            resource=resource,  # type: ignore[arg-type]
            action=action,  # type: ignore[arg-type]
        )
        name = f"{resource}.{action}"
        try:
            result = await handler(ctx=ctx, value=value)
        except Auth.exceptions.HTTPException as exc:
            raise HTTPException(exc.status_code, str(exc.detail), dict(exc.headers or {})) from None
        except AssertionError as exc:
            raise HTTPException(403, str(exc) or "Forbidden") from None
        except Exception as exc:
            log.error("the auth handler for %s failed: %s", name, self._reason(exc, scope or {"headers": []}))
            raise HTTPException(500, f"the server's auth handler for {name} failed ({type(exc).__name__})") from None
        if result is None or result is True:
            return None
        if result is False:
            raise HTTPException(403, "Forbidden")
        try:
            return checked_filter(result)
        except FilterError as exc:
            log.error("the auth handler for %s returned a bad filter: %s", name, exc)
            raise HTTPException(500, f"the server's auth handler for {name} returned a bad filter: {exc}") from None


def checked_filter(value: Any, depth: int = 0) -> Filter:
    """`value` as a filter, checked (LangGraph's rules), with JSON-ready values.

    Raises:
        FilterError: not a dict, an unknown operator, a bad `$or`/`$and`, nesting beyond `MAX_NESTING`.
    """
    if not isinstance(value, dict):
        raise FilterError(f"a filter is a dict, or None/True/False, not {type(value).__name__}")
    out: Filter = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key or any(c in key for c in '"\\') or not key.isprintable():
            raise FilterError(f"filter keys are non-empty printable strings without quotes or backslashes: {key!r}")
        if key in ("$or", "$and"):
            if depth >= MAX_NESTING:
                raise FilterError(f"{key} nested deeper than {MAX_NESTING}")
            if not isinstance(item, list) or len(item) < 2:
                raise FilterError(f"{key} takes a list of at least 2 filters")
            out[key] = [checked_filter(branch, depth + 1) for branch in item]
        elif key.startswith("$"):
            raise FilterError(f"unknown operator {key}: only $or and $and combine filters")
        elif isinstance(item, dict):
            if len(item) != 1 or next(iter(item)) not in OPERATORS:
                raise FilterError(f'{key}: an operator filter is {{"$eq": v}} or {{"$contains": v}}')
            op, operand = next(iter(item.items()))
            out[key] = {op: _json(operand)}
        else:
            out[key] = {"$eq": _json(item)}
    return out


def _json(value: Any) -> Any:
    """A filter value as JSON (a UUID or a datetime as its string), as the filter is matched in the database."""
    import orjson

    try:
        return orjson.loads(orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS))
    except TypeError as exc:
        raise FilterError(f"a filter value is not JSON: {exc}") from None


def matches(metadata: dict[str, Any], where: Filter | None) -> bool:
    """Whether `metadata` satisfies a checked filter (the records' SQL says the same in the database)."""
    if not where:
        return True
    for key, item in where.items():
        if key == "$or":
            if not any(matches(metadata, branch) for branch in item):
                return False
        elif key == "$and":
            if not all(matches(metadata, branch) for branch in item):
                return False
        else:
            op, operand = next(iter(item.items()))
            if key not in metadata:
                return False
            have = metadata[key]
            if op == "$eq" and not _same(have, operand):
                return False
            if op == "$contains":
                wanted = operand if isinstance(operand, list) else [operand]
                if not isinstance(have, list) or not all(any(_same(h, w) for h in have) for w in wanted):
                    return False
    return True


def _same(a: Any, b: Any) -> bool:
    """JSON equality (true is not 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b)


def as_id(value: str) -> Any:
    """A thread or run id as LangGraph hands it to handlers: a UUID when it is one, else the string."""
    try:
        return uuid.UUID(value)
    except ValueError:
        return value


async def authorize(request: HTTPConnection, resource: str, action: str, value: dict[str, Any]) -> Filter | None:
    """Run the request's auth handler for `resource.action` (nothing in the shared-key mode): its filter or None.

    Raises:
        HTTPException: the handler refused or failed (see `Access.authorize`).
    """
    caller = caller_of(request)
    if caller is None:
        return None
    access = request.scope.get(ACCESS)
    assert isinstance(access, Access)
    return await access.authorize(caller, resource, action, value, request.scope)
