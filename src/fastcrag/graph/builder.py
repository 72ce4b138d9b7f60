"""Graph wiring: the CRAG nodes, FLARE mode's nodes and the band-keyed conditional edges, in one place."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from fastcrag.components import Components
from fastcrag.config.calibration import Calibration
from fastcrag.config.settings import Context, Settings
from fastcrag.generation.generators import Generator
from fastcrag.grading.reranker import Reranker
from fastcrag.graph import routing
from fastcrag.graph.nodes import (
    abstain,
    admit,
    compose,
    draft,
    drop,
    generate,
    grade,
    lookup,
    refine,
    retrieve,
    rewrite,
)
from fastcrag.graph.state import FlareOutput, FlareState, InputState, OutputState, State
from fastcrag.retrieval.hybrid import RoutedSearch


def build_graph(
    *,
    retriever: BaseRetriever | VectorStore | RoutedSearch | None = None,
    reranker: Reranker | str | None = None,
    llm: BaseChatModel | Generator | str | None = None,
    calibration: Calibration | Path | None = None,
    settings: Settings | None = None,
    checkpointer: Any = None,
    parts: Components | None = None,
) -> CompiledStateGraph[State, Context, InputState, OutputState]:
    """Compile the CRAG graph; any part left out comes from the `FASTRAG_*` settings, loaded on first use.

    The graph holds both modes: a run's `mode` (`FASTRAG_MODE`, or the run's context) routes the answer to
    `generate` (CRAG) or to the `flare` subgraph (`build_flare`). A caller that also
    needs the parts themselves (to warm them up, read the grader's name, clear its cache) builds `Components` first
    and passes them as `parts`; the compiled graph carries nothing else.

    Args:
        retriever: A LangChain retriever or vector store, or any retriever searching by route (`RoutedSearch`); the
            configured FAISS index when None.
        reranker: A `Reranker`, or a spec (folder, model name, `bi-encoder`).
        llm: A LangChain chat model, a `Generator`, `extractive`, or a `provider:model` spec.
        calibration: Thresholds, or the calibration.json to read them from.
        settings: Settings; read from the environment when None.
        checkpointer: A LangGraph checkpointer, for threads that keep their history.
        parts: The components to run on, instead of `retriever`, `reranker`, `llm`, `calibration` and `settings`.

    Raises:
        TypeError: `parts` given together with any of the parts or settings it replaces.
        ValueError: the settings choose FLARE mode (`FASTRAG_MODE=flare`) and the generator cannot run it (the
            extractive generator, or a chat model that returns no token log-probabilities); the message names the
            mode and the provider. A run that asks for FLARE mode in its context gets the same reason as an
            abstention.
    """
    if parts is None:
        parts = Components(settings, retriever, reranker, llm, calibration)
    elif any(x is not None for x in (retriever, reranker, llm, calibration, settings)):
        raise TypeError("build_graph: give either `parts` or the parts themselves, not both")
    if parts.settings.mode == "flare" and (why := parts.flare_unsupported()):
        raise ValueError(why)

    def route_after_grade(  # a failure (settings that could not be resolved among them) leaves nothing to route on
        state: State, runtime: Runtime[Context]
    ) -> Literal["generate", "flare", "refine", "rewrite", "abstain"]:
        return "abstain" if routing.failed(state) else routing.after_grade(state, parts.run_config(runtime.context))

    def route_after_refine(state: State, runtime: Runtime[Context]) -> Literal["generate", "flare", "abstain"]:
        return "abstain" if routing.failed(state) else routing.after_refine(state, parts.run_config(runtime.context))

    builder = StateGraph(State, context_schema=Context, input_schema=InputState, output_schema=OutputState)
    builder.add_node("retrieve", retrieve.make(parts))
    builder.add_node("grade", grade.make(parts))
    builder.add_node("refine", refine.make(parts))
    builder.add_node("rewrite", rewrite.make(parts))
    builder.add_node("generate", generate.make(parts))
    builder.add_node("abstain", abstain.make(parts))
    builder.add_node("flare", build_flare(parts))  # FLARE mode, a subgraph with its own state
    builder.add_edge(START, "retrieve")
    builder.add_edge("retrieve", "grade")
    builder.add_conditional_edges("grade", route_after_grade)
    builder.add_conditional_edges("refine", route_after_refine)
    builder.add_conditional_edges("rewrite", routing.after_rewrite)
    builder.add_conditional_edges("generate", routing.after_generate)
    builder.add_edge("abstain", END)
    builder.add_edge("flare", END)
    return builder.compile(checkpointer=checkpointer, name="crag")


def build_flare(parts: Components) -> CompiledStateGraph[FlareState, Context, State, FlareOutput]:
    """FLARE mode as a subgraph: `draft` -> `lookup` -> `admit` | `drop` -> `draft` ... -> `compose` | `abstain`.

    It takes the graph's state, keeps its own fields (`FlareState`) for the one answer it writes, and hands back the
    answer or the abstention (`FlareOutput`).
    """

    def route_after_draft(state: FlareState, runtime: Runtime[Context]) -> Literal["lookup", "compose", "abstain"]:
        return "abstain" if routing.failed(state) else routing.after_draft(state, parts.run_config(runtime.context))

    flare = StateGraph(FlareState, context_schema=Context, input_schema=State, output_schema=FlareOutput)
    flare.add_node("draft", draft.make(parts))
    flare.add_node("lookup", lookup.make(parts))
    flare.add_node("admit", admit.make(parts))
    flare.add_node("drop", drop.make(parts))
    flare.add_node("compose", compose.make(parts))
    flare.add_node("abstain", abstain.make(parts))
    flare.add_edge(START, "draft")
    flare.add_conditional_edges("draft", route_after_draft)
    flare.add_conditional_edges("lookup", routing.after_lookup)
    flare.add_conditional_edges("admit", routing.after_admit)
    flare.add_edge("drop", "draft")
    flare.add_conditional_edges("compose", routing.after_generate)
    flare.add_edge("abstain", END)
    return flare.compile(name="flare")
