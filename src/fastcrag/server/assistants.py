"""The assistant routes of `fastcrag serve`: the one assistant, `crag`, its schemas, subgraphs and drawable graph.

With an `Auth` object (`access.py`), reading the assistant goes through the `assistants.read` handler and searching
or counting through `assistants.search`; a filter they return is matched against the assistant's metadata
(`{"created_by": "system"}`), so a handler that limits assistants to their owners hides it (404), as LangGraph does.
"""

from __future__ import annotations

import uuid
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from fastcrag.server.access import authorize, matches
from fastcrag.server.service import Service, service_of
from fastcrag.server.wire import OrjsonResponse, read_json

GRAPH_ID = "crag"
#: The assistant's id: the same uuid5 the LangGraph server derives from the graph id, so ids match `langgraph dev`.
ASSISTANT_ID = str(uuid.uuid5(uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8"), GRAPH_ID))


def _assistant(service: Service) -> dict[str, Any]:
    created = service.started.isoformat()
    return {
        "assistant_id": ASSISTANT_ID,
        "graph_id": GRAPH_ID,
        "config": {},
        "context": {},
        "metadata": _assistant_metadata(),
        "name": GRAPH_ID,
        "description": "Corrective RAG: retrieve, grade, then generate, refine, rewrite or abstain",
        "version": 1,
        "created_at": created,
        "updated_at": created,
    }


async def readable_assistant(request: Request) -> None:
    """The path's assistant, after the `assistants.read` auth handler allowed it.

    Raises:
        HTTPException: 404 for another assistant or one outside the handler's filter, 403 when it refuses.
    """
    assistant_id = request.path_params["assistant_id"]
    check_assistant(assistant_id)
    where = await authorize(request, "assistants", "read", {"assistant_id": uuid.UUID(ASSISTANT_ID)})
    if not matches(_assistant_metadata(), where):
        raise HTTPException(404, f"assistant {str(assistant_id)[:80]!r} not found")


def _assistant_metadata() -> dict[str, Any]:
    return {"created_by": "system"}


def check_assistant(assistant_id: Any) -> None:
    """Accept the graph id or the assistant's id.

    Raises:
        HTTPException: 404 for any other assistant.
    """
    if assistant_id not in (GRAPH_ID, ASSISTANT_ID):
        raise HTTPException(404, f"assistant {str(assistant_id)[:80]!r} not found (this server has `{GRAPH_ID}`)")


def _int(value: Any, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise HTTPException(422, "limit and offset must be non-negative integers")
    return value


async def _matching(request: Request) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The assistants matching a search or count body (`graph_id`, `name`, `metadata`), and the body."""
    service = service_of(request)
    body = await read_json(request, service.limits.max_body_bytes)
    graph_id, name, metadata = body.get("graph_id"), body.get("name"), body.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise HTTPException(422, "metadata must be a JSON object")
    value = {
        "graph_id": graph_id,
        "metadata": metadata,
        "limit": body.get("limit", 10),
        "offset": body.get("offset", 0),
    }
    where = await authorize(request, "assistants", "search", value)
    found = [
        a
        for a in [_assistant(service)]
        if graph_id in (None, GRAPH_ID)
        and (name is None or str(name) in GRAPH_ID)
        and all(a["metadata"].get(k) == v for k, v in metadata.items())
        and matches(a["metadata"], where)
    ]
    return found, body


async def search_assistants(request: Request) -> Response:
    """`POST /assistants/search`: the one assistant when it matches the filters."""
    found, body = await _matching(request)
    offset, limit = _int(body.get("offset"), 0), _int(body.get("limit"), 10)
    return OrjsonResponse(found[offset : offset + limit])


async def count_assistants(request: Request) -> Response:
    """`POST /assistants/count`: 1 when the one assistant matches the filters, else 0."""
    found, _ = await _matching(request)
    return OrjsonResponse(len(found))


async def assistant_subgraphs(request: Request) -> Response:
    """`GET /assistants/{id}/subgraphs[/{namespace}]`: each subgraph's schemas by namespace (`flare`), as LangGraph.

    `?recurse=true` adds the subgraphs' own subgraphs; a namespace names one (an unknown one: none, `{}`).
    """
    await readable_assistant(request)
    graph, recurse = service_of(request).graph, request.query_params.get("recurse") in ("true", "True")
    found = graph.get_subgraphs(namespace=request.path_params.get("namespace"), recurse=recurse)
    return OrjsonResponse({namespace: _schemas(subgraph) for namespace, subgraph in found})


async def get_assistant(request: Request) -> Response:
    """`GET /assistants/{id}`."""
    await readable_assistant(request)
    return OrjsonResponse(_assistant(service_of(request)))


async def assistant_schemas(request: Request) -> Response:
    """`GET /assistants/{id}/schemas`: input, output, state and context JSON schemas."""
    await readable_assistant(request)
    return OrjsonResponse({"graph_id": GRAPH_ID, **_schemas(service_of(request).graph)})


def _schemas(graph: Any) -> dict[str, Any]:
    """A compiled graph's JSON schemas: input, output, state (its channels, named after its state type), context."""
    channels: dict[str, Any] = {name: {} for name in graph.stream_channels_list}
    state_schema = {"title": graph.builder.state_schema.__name__, "type": "object", "properties": channels}
    return {
        "input_schema": graph.get_input_jsonschema(),
        "output_schema": graph.get_output_jsonschema(),
        "state_schema": state_schema,
        "config_schema": {},
        "context_schema": graph.get_context_jsonschema(),
    }


async def assistant_graph(request: Request) -> Response:
    """`GET /assistants/{id}/graph`: the drawable graph (RemoteGraph.get_graph)."""
    await readable_assistant(request)
    drawn = service_of(request).graph.get_graph().to_json()
    for node in drawn.get("nodes", []):
        if isinstance(node.get("data"), dict):
            node["data"].pop("id", None)
    return OrjsonResponse(drawn)
