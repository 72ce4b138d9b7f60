"""Parts by protocol: a user's own retriever and generator, plain classes, take the paths fastcrag's own parts take."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.documents import Document

from fastcrag import build_graph
from fastcrag.config.settings import Settings
from fastcrag.generation.flare import EXTRACTIVE, unsupported
from fastcrag.generation.generators import Answer, ChatBacked
from fastcrag.retrieval.hybrid import Mode, RoutedSearch, TermWeights

from fakes import CALIBRATION, FakeChat, LogprobChat, ScriptedReranker, doc, tokens

GOOD = "The Eiffel Tower is in Paris. It was completed in 1889 for the World's Fair."
BAD = "Bananas are yellow fruit grown in the tropics."


class RouteRetriever:
    """Searches by route to a given depth and weighs words: no LangChain or fastcrag base class."""

    def __init__(self, docs: list[Document], lexical: list[Document] | None = None) -> None:
        self.k = 3
        self.docs = docs
        self.lexical = lexical or docs
        self.calls: list[tuple[str, Mode | None, int | None]] = []
        self.weighed: list[str] = []

    def search(self, query: str, mode: Mode | None = None, k: int | None = None) -> tuple[list[Document], str]:
        self.calls.append((query, mode, k))
        found = self.lexical if mode == "lexical" else self.docs
        return found[: k or self.k], f"mine ({mode or 'own'})"

    def idf(self) -> Callable[[str], float] | None:
        return lambda word: self.weighed.append(word) or 1.0


class OwnGenerator:
    """A generator of one's own over a chat model (`llm`), which FLARE drafts with."""

    name = "own"

    def __init__(self, llm: Any) -> None:
        self.llm = llm

    def generate(self, question: str, passages: Sequence[Mapping[str, Any]]) -> Answer:
        return Answer("Own answer.", list(range(len(passages))))

    def rewrite(self, question: str) -> str:
        raise RuntimeError("no rewrites here")

    def standalone(self, history: Sequence[tuple[str, str]], question: str) -> str:
        return question


class Quoter(OwnGenerator):
    """A generator that declares it quotes its passages (as fastcrag's extractive one does)."""

    extractive = True

    def generate(self, question: str, passages: Sequence[Mapping[str, Any]], **floors: Any) -> Answer:
        self.floors = floors
        return Answer(str(passages[0]["text"]), [0])


def test_the_protocols_see_capabilities_not_classes() -> None:
    retriever = RouteRetriever([])
    assert isinstance(retriever, RoutedSearch) and isinstance(retriever, TermWeights)
    assert isinstance(OwnGenerator(FakeChat()), ChatBacked)
    assert unsupported(OwnGenerator(FakeChat())) is not None  # a chat model without log-probabilities
    assert unsupported(OwnGenerator(LogprobChat())) is None
    assert unsupported(Quoter(None)) == EXTRACTIVE


def test_a_retriever_of_ones_own_is_searched_by_route() -> None:
    retriever = RouteRetriever([doc(GOOD, "g1"), doc(BAD, "b1")])
    graph = build_graph(
        retriever=retriever, reranker=ScriptedReranker({"Eiffel": 0.9}), llm=FakeChat(), calibration=CALIBRATION
    )
    out = graph.invoke({"question": "Where is the Eiffel Tower?"})
    assert out["answer"] == "The answer is 42." and out["crag"]["retrieval"] == "mine (own)"
    assert retriever.calls == [("Where is the Eiffel Tower?", None, 3)]


def test_its_word_weights_make_the_keyword_rewrite_searched_lexically() -> None:
    # the first pass finds nothing usable; the generator gives no rewrite; the keywords find the answer
    retriever = RouteRetriever([doc(BAD, "b1")], lexical=[doc(GOOD, "g1")])
    graph = build_graph(
        retriever=retriever,
        reranker=ScriptedReranker({"completed in 1889": 0.9}),
        llm=OwnGenerator(FakeChat()),
        calibration=CALIBRATION,
    )
    out = graph.invoke({"question": "When was the Eiffel tower completed?"})
    crag = out["crag"]
    assert crag["rewriter"] == "keyword" and crag["action"] == "rewrite" and out["answer"] == "Own answer."
    assert retriever.calls[1][1] == "lexical" and crag["retrieval"] == "mine (lexical)"
    assert retriever.weighed  # the keyword rewrite weighed words by the retriever's own weights


def test_a_generator_of_ones_own_drives_flare_and_a_quoting_one_gets_its_floors() -> None:
    chat = LogprobChat(drafts=[tokens("The tower is in Paris.")])
    flare = build_graph(
        retriever=RouteRetriever([doc(GOOD, "g1")]),
        reranker=ScriptedReranker({"Eiffel": 0.9}),
        llm=OwnGenerator(chat),
        calibration=CALIBRATION.model_copy(update={"flare_threshold": 0.5}),
        settings=Settings(mode="flare"),
    )
    out = flare.invoke({"question": "Where is the Eiffel Tower?"})
    assert out["answer"] == "The tower is in Paris." and out["crag"]["flare_stop"] == "end"
    quoter = Quoter(None)
    graph = build_graph(
        retriever=RouteRetriever([doc(GOOD, "g1")]),
        reranker=ScriptedReranker({"Eiffel": 0.9}),
        llm=quoter,
        calibration=CALIBRATION,
    )
    assert graph.invoke({"question": "Where is the Eiffel Tower?"})["answer"] == GOOD
    assert quoter.floors == {"abstain": True, "ambiguous": False}
