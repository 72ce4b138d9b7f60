"""FLARE mode: every branch, driven by a scripted chat model that returns token log-probabilities."""

from __future__ import annotations

import random
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from prometheus_client import REGISTRY

from fastcrag import build_graph
from fastcrag.config.calibration import load_calibration, packaged_flare_threshold
from fastcrag.config.settings import Context, Settings, resolve
from fastcrag.generation.flare import (
    FlareWriter,
    marked,
    masked_query,
    sentences_of,
    token_probs,
    uncertain,
    uncertain_words,
)
from fastcrag.graph import routing
from fastcrag.graph.state import ActiveRetrieval, FlareTimings

from fakes import CALIBRATION, LOWER, UPPER, FakeChat, ListRetriever, LogprobChat, ScriptedReranker, doc, tokens

THRESHOLD = 0.5
CAL = CALIBRATION.model_copy(update={"flare_threshold": THRESHOLD})
GOOD = "The Eiffel Tower is in Paris. It was completed in 1889 for the World's Fair."
FACT = "Gustave Eiffel's company built the tower; it opened in March 1889."
MIXED = "Paris has many museums. The Eiffel Tower is 330 metres tall. Bread is sold daily."
BAD = "Bananas are yellow fruit grown in the tropics."
QUESTION = "Tell me about the Eiffel Tower."


def make(
    drafts: list[Any],
    scores: dict[str, float] | None = None,
    by_query: dict[str, list[Any]] | None = None,
    question: Any = None,
    context: Context | None = None,
    **settings: Any,
) -> tuple[dict[str, Any], LogprobChat, ListRetriever]:
    """Ask QUESTION in FLARE mode over GOOD (CORRECT), with `by_query` answering the active retrievals."""
    chat = LogprobChat(drafts=drafts, question=question)
    retriever = ListRetriever(docs=[doc(GOOD, "g1")], by_query=by_query or {})
    graph = build_graph(
        retriever=retriever,
        reranker=ScriptedReranker(scores if scores is not None else {"Eiffel": 0.9}),
        llm=chat,
        calibration=CAL,
        settings=Settings(mode="flare", **settings),
    )
    return graph.invoke({"question": QUESTION}, context=context), chat, retriever


def flare_count(action: str) -> float:
    return REGISTRY.get_sample_value("crag_actions_total", {"action": f"flare_{action}"}) or 0.0


def test_graph_draws_the_flare_subgraph() -> None:
    graph = build_graph(
        retriever=ListRetriever(docs=[]), reranker=ScriptedReranker({}), llm=LogprobChat(), calibration=CAL
    )
    assert "\tflare(flare)" in graph.get_graph().draw_mermaid()  # one node of the graph
    mermaid = graph.get_graph(xray=True).draw_mermaid()  # as Studio draws it: the subgraph's own nodes
    for node in ("draft", "lookup", "admit", "drop", "compose", "abstain"):
        assert f"\tflare\\3a{node}({node})" in mermaid
    for edge in (
        "grade -.-> flare:__start__",
        "refine -.-> flare:__start__",
        "flare:__start__ --> flare:draft",
        "flare:draft -.-> flare:lookup",
        "flare:draft -.-> flare:compose",
        "flare:draft -.-> flare:abstain",
        "flare:lookup -.-> flare:admit",
        "flare:lookup -.-> flare:drop",
        "flare:admit -.-> flare:draft",
        "flare:drop --> flare:draft",
        "flare:compose -.-> flare:__end__",
        "flare:compose -.-> flare:abstain",
        "flare:__end__ --> __end__",
    ):
        assert edge.replace(":", "\\3a") in mermaid


def test_routing_picks_the_answer_node_by_mode() -> None:
    crag = resolve(Settings(), (LOWER, UPPER), Context())
    flare = resolve(Settings(), (LOWER, UPPER), Context(mode="flare"), flare_threshold=THRESHOLD)
    assert routing.after_grade({"band": "CORRECT"}, crag) == "generate"
    assert routing.after_grade({"band": "CORRECT"}, flare) == "flare"
    assert routing.after_grade({"band": "AMBIGUOUS"}, flare) == "refine"
    assert routing.after_refine({}, flare) == "flare" and routing.after_refine({}, crag) == "generate"
    assert (
        routing.after_grade(
            {"band": "AMBIGUOUS"}, resolve(Settings(), (LOWER, UPPER), Context(mode="flare", crag_enabled=False))
        )
        == "flare"
    )
    plain = resolve(Settings(), (LOWER, UPPER), Context(mode="flare", crag_enabled=False, plain=True))
    assert routing.after_grade({"band": "INCORRECT"}, plain) == "generate"  # plain RAG grades nothing: no FLARE
    pending = {"pending": {"text": "x", "tokens": [], "probs": [], "starts": []}}
    assert routing.after_draft(pending, flare) == "lookup"  # type: ignore[arg-type]
    assert routing.after_draft({**pending, "flare": [{}] * 2}, flare) == "compose"  # type: ignore[arg-type]
    assert routing.after_draft({}, flare) == "compose"
    for band, node in (("CORRECT", "admit"), ("AMBIGUOUS", "admit"), ("INCORRECT", "drop"), (None, "drop")):
        assert routing.after_lookup({"flare": [{"band": band}]}) == node  # type: ignore[typeddict-item]


def test_confident_sentences_are_kept_without_active_retrieval() -> None:
    out, chat, retriever = make([tokens("The tower is in Paris. It opened in 1889.")])
    assert out["answer"] == "The tower is in Paris. It opened in 1889."
    crag = out["crag"]
    assert crag["action"] == "generate" and crag["band"] == "CORRECT"
    assert crag["flare"] == [] and crag["flare_stop"] == "end"
    assert set(crag["timings"]) == {"retrieve_ms", "rerank_ms", "crag_ms", "generate_ms", "flare_ms"}
    assert retriever.queries == [QUESTION] and len(chat.prompts) == 1
    # one non-streamed call with log-probabilities (servers return them only then)
    assert chat.calls[0]["logprobs"] is True and chat.calls[0]["stream"] is False
    assert chat.calls[0]["top_logprobs"] == 1  # llama-cpp-python's server returns none without it
    assert [c["chunk_id"] for c in out["citations"]] == ["g1"]


def test_uncertain_sentence_with_correct_evidence_is_written_again() -> None:
    before = flare_count("add")
    drafts = [
        tokens("The tower is in Paris. It was built in 1999.", low=["1999"]),
        tokens("It was completed in 1889."),
    ]
    out, chat, retriever = make(drafts, by_query={"built": [doc(FACT, "f1")]})
    assert out["answer"] == "The tower is in Paris. It was completed in 1889."
    (entry,) = out["crag"]["flare"]
    assert entry["sentence"] == "It was built in 1999." and entry["uncertain"] == ["1999."]
    assert entry["query"] == "It was built in" and entry["query_by"] == "masked"
    assert entry["band"] == "CORRECT" and entry["action"] == "add" and entry["added"] == ["f1"]
    assert entry["rewritten"] == "It was completed in 1889." and entry["failure"] is None
    assert retriever.queries == [QUESTION, "It was built in"]
    # the sentence is written again on the added evidence, after the sentence kept before it
    assert FACT in chat.prompts[1] and "The tower is in Paris." in chat.prompts[1] and FACT not in chat.prompts[0]
    assert [c["chunk_id"] for c in out["citations"]] == ["g1", "f1"]
    assert flare_count("add") == before + 1
    assert out["crag"]["timings"]["flare_ms"] > 0


def test_uncertain_sentence_with_ambiguous_evidence_adds_refined_strips() -> None:
    before = flare_count("refine")
    drafts = [
        tokens("The tower is in Paris. It is 300 metres tall.", low=["300"]),
        tokens("It is 330 metres tall."),
    ]
    scores = {"330 metres": 0.5, "Eiffel": 0.9}
    out, chat, _ = make(drafts, scores=scores, by_query={"metres": [doc(MIXED, "m1")]})
    (entry,) = out["crag"]["flare"]
    assert entry["band"] == "AMBIGUOUS" and entry["action"] == "refine" and entry["added"] == ["m1"]
    assert out["answer"] == "The tower is in Paris. It is 330 metres tall."
    assert "The Eiffel Tower is 330 metres tall." in chat.prompts[1]
    assert "Bread is sold daily" not in chat.prompts[1] and "museums" not in chat.prompts[1]
    assert flare_count("refine") == before + 1


def test_uncertain_sentence_with_incorrect_evidence_is_dropped() -> None:
    before = flare_count("drop")
    drafts = [tokens("The tower is in Paris. It was built by aliens. It stands in France.", low=["aliens"])]
    out, chat, _ = make(drafts, by_query={"built by": [doc(BAD, "b1")]})
    assert out["answer"] == "The tower is in Paris. It stands in France."
    (entry,) = out["crag"]["flare"]
    assert entry["band"] == "INCORRECT" and entry["action"] == "drop" and entry["rewritten"] is None
    assert entry["added"] == [] and [c["chunk_id"] for c in out["citations"]] == ["g1"]  # BAD never cited
    assert len(chat.prompts) == 1  # the rest of the draft is checked as it was, not drafted again
    assert flare_count("drop") == before + 1


class _FailingLookup(ListRetriever):
    """Answers the question; raises on the active retrieval's query."""

    def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Any]:
        if "built" in query:
            raise RuntimeError("index offline")
        return super()._get_relevant_documents(query, run_manager=run_manager)


def test_a_failed_search_drops_the_sentence() -> None:
    chat = LogprobChat(drafts=[tokens("The tower is in Paris. It was built by aliens.", low=["aliens"])])
    graph = build_graph(
        retriever=_FailingLookup(docs=[doc(GOOD, "g1")]), reranker=ScriptedReranker({"Eiffel": 0.9}), llm=chat,
        calibration=CAL, settings=Settings(mode="flare"),
    )  # fmt: skip
    out = graph.invoke({"question": QUESTION})
    (entry,) = out["crag"]["flare"]
    assert entry["band"] is None and entry["action"] == "drop" and "index offline" in entry["failure"]
    assert out["answer"] == "The tower is in Paris."


def test_no_sentence_is_asserted_after_an_incorrect_active_retrieval() -> None:
    """Random drafts, every active retrieval INCORRECT: the answer holds only sentences whose tokens were confident."""
    rng = random.Random(13)
    words = ["tower", "iron", "Paris", "height", "visitors", "paint", "lift", "river", "fair", "engineer"]
    for trial in range(40):
        written = []
        for k in range(rng.randint(1, 5)):
            text = f"Sentence {trial} {k} says {rng.choice(words)} {rng.choice(words)}."
            low = [w for w in text.split() if rng.random() < 0.15]
            written.append((text, tokens(text, low=[w.strip(".") for w in low])))
        draft = [t for k, (_, toks) in enumerate(written) for t in ([(" ", 0.9)] if k else []) + toks]
        chat = LogprobChat(drafts=[draft])
        # the question finds GOOD; every active retrieval, whatever its query, finds BAD
        retriever = ListRetriever(docs=[doc(BAD, "b1")], by_query={"Eiffel Tower": [doc(GOOD, "g1")]})
        graph = build_graph(
            retriever=retriever,
            reranker=ScriptedReranker({"Eiffel": 0.9}),
            llm=chat,
            calibration=CAL,
            settings=Settings(mode="flare", flare_max_retrievals=8, flare_max_sentences=8),
        )
        out = graph.invoke({"messages": [HumanMessage(QUESTION)]})
        confident = [text for text, toks in written if all(p >= THRESHOLD for _, p in toks)]
        uncertain_texts = [text for text, toks in written if any(p < THRESHOLD for _, p in toks)]
        if confident:
            assert out["answer"] == " ".join(confident)
        else:
            assert out["answer"] == "I don't know." and out["crag"]["action"] == "abstain"
        for text in uncertain_texts:
            assert text not in out["answer"] and text not in str(out["messages"][-1].content)
        assert all(r["band"] == "INCORRECT" and r["action"] == "drop" for r in out["crag"]["flare"])
        assert len(out["crag"]["flare"]) == len(uncertain_texts)
        assert len(chat.prompts) == 1


def test_a_dropped_sentence_drafted_again_is_never_kept() -> None:
    """After an INCORRECT retrieval, a later draft that writes the dropped sentence again does not assert it."""
    drafts = [
        tokens("It was built by aliens. It was built in 1999.", low=["aliens", "1999"]),
        tokens("It was built by aliens. It was completed in 1889."),  # the redo's draft repeats the dropped one
    ]
    out, chat, _ = make(drafts, by_query={"by": [doc(BAD, "b1")], "in": [doc(FACT, "f1")]})
    assert [r["action"] for r in out["crag"]["flare"]] == ["drop", "add"]
    assert out["answer"] == "It was completed in 1889." and "aliens" not in out["answer"]
    assert out["crag"]["flare"][1]["rewritten"] == "It was completed in 1889." and len(chat.prompts) == 2


class _VacuousQueries(ScriptedReranker):
    """Grades the question by keyword; any other query (a sentence's) matches every passage, as a vacuous one does."""

    def score(self, query: str, texts: Any) -> list[float]:
        self.calls.append((query, list(texts)))
        return [next((v for k, v in self.scores.items() if k in t), 0.05) if query == QUESTION else 0.95 for t in texts]


@pytest.mark.parametrize(("found", "band"), [(BAD, "INCORRECT"), (FACT, "CORRECT")])
def test_active_retrieval_evidence_must_also_answer_the_question(found: str, band: str) -> None:
    chat = LogprobChat(drafts=[tokens("(1) It was built by aliens.", low=["aliens"]), tokens("It opened in 1889.")])
    reranker = _VacuousQueries({"Eiffel": 0.9})
    graph = build_graph(
        retriever=ListRetriever(docs=[doc(GOOD, "g1")], by_query={"built": [doc(found, "x1")]}), reranker=reranker,
        llm=chat, calibration=CAL, settings=Settings(mode="flare"),
    )  # fmt: skip
    out = graph.invoke({"question": QUESTION})
    (entry,) = out["crag"]["flare"]
    assert entry["query"] == "(1) It was built by" and entry["band"] == band
    assert {q for q, _ in reranker.calls} == {QUESTION, "(1) It was built by"}  # graded against both
    assert "aliens" not in out["answer"]


def test_retrieval_cap_stops_writing_at_an_uncertain_sentence() -> None:
    text = "Alpha is first. Beta is maybe second. Gamma is maybe third. Delta is fourth."
    drafts = [tokens(text, low=["maybe"])]
    out, _, retriever = make(drafts, by_query={"second": [doc(BAD, "b1")]}, flare_max_retrievals=1)
    assert out["answer"] == "Alpha is first."  # Gamma is never searched, so neither it nor Delta is asserted
    assert [r["sentence"] for r in out["crag"]["flare"]] == ["Beta is maybe second."]
    assert out["crag"]["flare_stop"] == "retrieval cap" and len(retriever.queries) == 2


def test_sentence_cap() -> None:
    out, _, _ = make([tokens("One is here. Two is here. Three is here. Four is here.")], flare_max_sentences=2)
    assert out["answer"] == "One is here. Two is here." and out["crag"]["flare_stop"] == "sentence cap"


def test_no_retrieval_allowed_and_nothing_confident_abstains() -> None:
    out, _, retriever = make([tokens("It was built by aliens.", low=["aliens"])], flare_max_retrievals=0)
    assert out["answer"] == "I don't know." and out["crag"]["action"] == "abstain"
    assert "asserted no sentence" in out["crag"]["failure"] and retriever.queries == [QUESTION]
    assert out["crag"]["flare"] == [] and out["crag"]["flare_stop"] is None


def test_the_question_way_asks_the_chat_model_for_the_uncertain_words() -> None:
    drafts = [tokens("It was built in 1999.", low=["1999"]), tokens("It was completed in 1889.")]
    asked = {"question": "When was the Eiffel Tower completed?"}
    out, chat, retriever = make(
        drafts, by_query={"completed": [doc(FACT, "f1")]}, question=asked, flare_query="question"
    )
    (entry,) = out["crag"]["flare"]
    assert entry["query"] == "When was the Eiffel Tower completed?" and entry["query_by"] == "question"
    assert "It was built in [[1999.]]" in chat.structured[0]
    assert retriever.queries[-1] == "When was the Eiffel Tower completed?"
    assert out["answer"] == "It was completed in 1889."
    # a question that fails: the masked sentence is searched
    out, *_ = make(drafts, by_query={"built": [doc(FACT, "f1")]}, question=RuntimeError("down"), flare_query="question")
    (entry,) = out["crag"]["flare"]
    assert entry["query"] == "It was built in" and entry["query_by"].startswith("masked (the question failed: Runtime")


def test_first_evidence_is_corrected_as_crag_does() -> None:
    """AMBIGUOUS first evidence is refined and INCORRECT rewritten, exactly as CRAG does, before FLARE writes."""
    chat = LogprobChat(drafts=[tokens("It is 330 metres tall.")], question={"query": "Eiffel Tower height"})
    retriever = ListRetriever(docs=[doc(MIXED, "m1")])
    graph = build_graph(
        retriever=retriever, reranker=ScriptedReranker({"330 metres": 0.6, "Eiffel": 0.5}), llm=chat,
        calibration=CAL, settings=Settings(mode="flare"),
    )  # fmt: skip
    out = graph.invoke({"question": "How tall is the Eiffel Tower?"})
    assert out["crag"]["action"] == "refine" and out["crag"]["strips_kept"] == 1
    assert "Bread is sold daily" not in chat.prompts[0]
    retriever = ListRetriever(docs=[doc(BAD, "b1")], by_query={"Eiffel": [doc(GOOD, "g1")]})
    chat = LogprobChat(drafts=[tokens("It is in Paris.")], question={"query": "Eiffel Tower location"})
    graph = build_graph(
        retriever=retriever, reranker=ScriptedReranker({"Eiffel": 0.9}), llm=chat, calibration=CAL,
        settings=Settings(mode="flare"),
    )  # fmt: skip
    out = graph.invoke({"question": "where's the big tower"})
    assert out["crag"]["action"] == "rewrite" and out["answer"] == "It is in Paris."
    chat = LogprobChat(drafts=[tokens("It is in Paris.")], question={"query": "something else"})
    graph = build_graph(
        retriever=ListRetriever(docs=[doc(BAD, "b1")]), reranker=ScriptedReranker({}), llm=chat, calibration=CAL,
        settings=Settings(mode="flare"),
    )  # fmt: skip
    out = graph.invoke({"question": "who won the world cup"})
    assert out["crag"]["action"] == "abstain" and chat.prompts == []  # nothing drafted on INCORRECT evidence


def test_the_mode_is_a_per_run_knob() -> None:
    chat = LogprobChat(drafts=[tokens("The tower is in Paris.")])
    graph = build_graph(
        retriever=ListRetriever(docs=[doc(GOOD, "g1")]), reranker=ScriptedReranker({"Eiffel": 0.9}), llm=chat,
        calibration=CAL,
    )  # fmt: skip
    crag = graph.invoke({"question": QUESTION})["crag"]
    assert "flare" not in crag and "flare_ms" not in crag["timings"]  # the CRAG trace is unchanged
    assert "logprobs" not in chat.calls[0]
    out = graph.invoke({"question": QUESTION}, context=Context(mode="flare", flare_threshold=0.95))
    assert out["crag"]["flare"] and out["crag"]["flare"][0]["sentence"] == "The tower is in Paris."
    assert chat.calls[1]["logprobs"] is True


def test_the_threshold_is_calibration_data() -> None:
    packaged = load_calibration()
    assert packaged.flare_threshold is not None and packaged_flare_threshold() == packaged.flare_threshold
    assert "flare_threshold" in packaged.objective
    chat = LogprobChat(drafts=[tokens("The tower is in Paris.", low=["Paris"], low_prob=0.3)])
    graph = build_graph(
        retriever=ListRetriever(docs=[doc(GOOD, "g1")]), reranker=ScriptedReranker({"Eiffel": 0.9}), llm=chat,
        calibration=CALIBRATION.model_copy(update={"flare_threshold": 0.2}), settings=Settings(mode="flare"),
    )  # fmt: skip
    assert graph.invoke({"question": QUESTION})["crag"]["flare"] == []  # 0.3 >= 0.2: confident
    out = graph.invoke({"question": QUESTION}, context=Context(flare_threshold=0.4))
    assert len(out["crag"]["flare"]) == 1  # the run's override: 0.3 < 0.4
    graph = build_graph(
        retriever=ListRetriever(docs=[doc(GOOD, "g1")]), reranker=ScriptedReranker({"Eiffel": 0.9}), llm=chat,
        calibration=CALIBRATION, settings=Settings(mode="flare"),
    )  # fmt: skip
    thresholds = graph.invoke({"question": QUESTION})["crag"]
    assert thresholds["action"] == "generate"  # a calibration without its own takes the packaged threshold


@pytest.mark.parametrize(
    ("llm", "named"),
    [
        (FakeChat(), "FakeChat has no `logprobs` option"),
        ("extractive", "the extractive generator has no FLARE mode"),
        ("anthropic:claude-sonnet", "provider 'anthropic' (FASTRAG_LLM=anthropic:claude-sonnet)"),
    ],
    ids=["chat-model", "extractive", "provider"],
)
def test_a_generator_without_log_probabilities_is_refused_at_build_time(llm: Any, named: str) -> None:
    with pytest.raises(ValueError, match="mode flare") as info:
        build_graph(
            retriever=ListRetriever(docs=[]), reranker=ScriptedReranker({}), llm=llm, calibration=CAL,
            settings=Settings(mode="flare"),
        )  # fmt: skip
    assert named in str(info.value)
    # built for CRAG, the same generator asked for FLARE in a run abstains with the same reason
    graph = build_graph(
        retriever=ListRetriever(docs=[doc(GOOD, "g1")]), reranker=ScriptedReranker({"Eiffel": 0.9}), llm=llm,
        calibration=CAL, settings=Settings(),
    )  # fmt: skip
    out = graph.invoke({"question": QUESTION}, context={"mode": "flare"})
    assert out["answer"] == "I don't know." and named in out["crag"]["failure"]


def test_a_reply_without_log_probabilities_abstains() -> None:
    class Forgetful(LogprobChat):
        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
            return super()._generate(messages, stop, run_manager)  # drops `logprobs`

    chat = Forgetful(drafts=[tokens("The tower is in Paris.")])
    graph = build_graph(
        retriever=ListRetriever(docs=[doc(GOOD, "g1")]), reranker=ScriptedReranker({"Eiffel": 0.9}), llm=chat,
        calibration=CAL, settings=Settings(mode="flare"),
    )  # fmt: skip
    out = graph.invoke({"question": QUESTION})
    assert out["crag"]["action"] == "abstain" and "returned no token log-probabilities" in out["crag"]["failure"]


def test_the_trace_is_typed() -> None:
    drafts = [tokens("It was built in 1999.", low=["1999"]), tokens("It was completed in 1889.")]
    out, *_ = make(drafts, by_query={"built": [doc(FACT, "f1")]})
    (entry,) = out["crag"]["flare"]
    assert set(entry) == ActiveRetrieval.__required_keys__ | ActiveRetrieval.__optional_keys__
    assert set(entry["timings"]) == FlareTimings.__required_keys__
    assert entry["timings"]["generate_ms"] >= 0 and entry["top_score"] == pytest.approx(0.9)


def test_draft_tokens_are_not_streamed_as_the_answer() -> None:
    drafts = [tokens("The tower is in Paris. It was built by aliens.", low=["aliens"])]
    chat = LogprobChat(drafts=drafts)
    graph = build_graph(
        retriever=ListRetriever(docs=[doc(GOOD, "g1")], by_query={"built": [doc(BAD, "b1")]}),
        reranker=ScriptedReranker({"Eiffel": 0.9}), llm=chat, calibration=CAL, settings=Settings(mode="flare"),
    )  # fmt: skip
    streamed = [m for m, _ in graph.stream({"messages": [HumanMessage(QUESTION)]}, stream_mode="messages")]
    assert streamed and all("aliens" not in str(m.content) for m in streamed)


# -- the writer's pieces


def test_sentences_carry_their_tokens() -> None:
    text = "Glaucoma damages the optic nerve, e.g. by pressure. It can be treated!\nSee a doctor"
    pairs = [(t, 0.9) for t in ["Gl", "aucoma", " damages", " the", " optic", " nerve", ",", " e", ".g", ".", " by"]]
    pairs += [(" pressure", 0.2), (".", 0.3), (" It", 0.9), (" can", 0.9), (" be", 0.9), (" treated", 0.9)]
    pairs += [("!", 0.9), ("\n", 0.9), ("See", 0.9), (" a", 0.9), (" doctor", 0.9)]
    found = sentences_of(text, pairs)
    assert [s["text"] for s in found] == [
        "Glaucoma damages the optic nerve, e.g. by pressure.",
        "It can be treated!",
        "See a doctor",
    ]
    first = found[0]
    assert first["tokens"][-2:] == [" pressure", "."] and uncertain(first, 0.5) == [11]  # punctuation never counts
    assert uncertain_words(first, 0.5) == ["pressure."]
    assert masked_query(first, 0.5) == "Glaucoma damages the optic nerve, e.g. by"
    assert marked(first, 0.5) == "Glaucoma damages the optic nerve, e.g. by [[pressure.]]"
    assert found[1]["tokens"][0] == " It" and found[1]["starts"][0] == 0
    assert [s["text"] for s in sentences_of(text, pairs, cut=True)] == [found[0]["text"], found[1]["text"]]


def test_echoed_delimiters_are_no_sentences() -> None:
    text = "It is tall. </answer> <passages> It is old</answer>"
    pairs = [(t, 0.9) for t in ["It", " is", " tall", ".", " </", "answer", ">", " <", "passages", ">", " It"]]
    pairs += [(" is", 0.9), (" old", 0.9), ("</", 0.9), ("answer", 0.9), (">", 0.9)]
    found = sentences_of(text, pairs)
    assert [s["text"] for s in found] == ["It is tall.", "It is old"]
    assert found[1]["tokens"] == [" It", " is", " old"]


def test_masking_every_word_searches_the_sentence() -> None:
    (sentence,) = sentences_of("Odd words.", [("Odd", 0.1), (" words", 0.1), (".", 0.9)])
    assert masked_query(sentence, 0.5) == "Odd words."
    assert marked(sentence, 0.5) == "[[Odd words.]]"


def test_token_probabilities_are_read_from_openai_style_metadata() -> None:
    from langchain_core.messages import AIMessage

    reply = AIMessage("Hi", response_metadata={"logprobs": {"content": [{"token": "Hi", "logprob": -0.5}]}})
    assert token_probs(reply) == [("Hi", pytest.approx(0.6065, abs=1e-4))]
    with pytest.raises(ValueError, match="no token log-probabilities"):
        token_probs(AIMessage("Hi"))
    writer = FlareWriter(LogprobChat(drafts=[tokens("A b c.")]))
    assert [s["text"] for s in writer.draft("q", [{"text": "p", "source": "s"}], [])] == ["A b c."]


def test_the_in_process_model_records_each_sampled_tokens_probability() -> None:
    """llama.cpp's logits processor: each call's logits price the token the next call shows as sampled."""
    import math

    import numpy as np

    from fastcrag.generation.chat import _TokenLogprobs

    class Detokenizer:
        def detokenize(self, ids: list[int], prev_tokens: list[int] | None = None) -> bytes:
            return {2: b" two", 0: b" zero"}[ids[0]]

    recorder = _TokenLogprobs()
    step = np.array([0.0, 1.0, 2.0])
    assert recorder([7, 8, 9], step) is step  # the prompt's last position: the scores pass through unchanged
    recorder([7, 8, 9, 2], np.array([3.0, 0.0, 0.0]))  # token 2 was sampled from the first logits
    recorder([7, 8, 9, 2, 0], np.array([0.0, 0.0, 0.0]))  # then token 0 from the second
    assert recorder.ids == [2, 0]
    first = 2.0 - math.log(1 + math.e + math.e**2)
    second = 3.0 - math.log(math.e**3 + 2)
    assert recorder.logprobs == [pytest.approx(first), pytest.approx(second)]
    assert recorder.content(Detokenizer()) == [
        {"token": " two", "logprob": pytest.approx(first)},
        {"token": " zero", "logprob": pytest.approx(second)},
    ]
