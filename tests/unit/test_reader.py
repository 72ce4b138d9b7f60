"""The reader head's span decoding and the extractive reader generator, with a scripted reader."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from fastcrag.fitting.model import find_answer, span_targets
from fastcrag.generation.extractive import ExtractiveGenerator, answer_with_sentence
from fastcrag.generation.generators import generate_answer
from fastcrag.grading.reader import Span, best_span, is_reader, span_margins

from fakes import ScriptedReranker

PASSAGE = "The Normans came from Normandy. Their leader Rollo swore fealty to Charles III. They settled in France."


class ScriptedReader:
    """Reads the first span listed for a passage; scores every passage 0.9."""

    name = "scripted-reader"
    has_reader = True

    def __init__(self, spans: dict[str, float]) -> None:
        self.spans = spans

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        return [0.9 for _ in texts]

    def read(self, query: str, texts: Sequence[str]) -> list[Span | None]:
        out: list[Span | None] = []
        for t in texts:
            hit = next(((p, s) for p, s in self.spans.items() if p in t), None)
            out.append(Span(hit[0], t.index(hit[0]), t.index(hit[0]) + len(hit[0]), hit[1]) if hit else None)
        return out


def test_best_span_respects_mask_order_and_length() -> None:
    start = np.array([5.0, 0.0, 3.0, 0.0, 9.0])
    end = np.array([5.0, 0.0, 1.0, 4.0, -9.0])
    mask = np.array([False, True, True, True, True])
    i, j, logit = best_span(start, end, mask)
    # position 0 ([CLS]) is masked; (4, 4) has a bad end; end before start is never chosen
    assert (i, j) == (2, 3) and logit == pytest.approx(7.0)
    assert best_span(start, end, mask, max_tokens=1)[:2] == (2, 2)
    assert best_span(start, end, np.zeros(5, dtype=bool))[0] == -1


def test_span_margin_is_relative_to_no_answer() -> None:
    start = np.array([2.0, 1.0, 0.0])
    end = np.array([2.0, 0.0, 1.0])
    ((i, j, margin),) = span_margins([start], [end], [np.array([False, True, True])])
    assert (i, j) == (1, 2) and margin == pytest.approx(2.0 - 4.0)


def test_answer_targets_map_characters_to_tokens() -> None:
    assert find_answer(PASSAGE, "rollo") == (PASSAGE.index("Rollo"), PASSAGE.index("Rollo") + 5)
    assert find_answer(PASSAGE, "Vikings") == (-1, -1)
    offsets = [(0, 0), (0, 3), (0, 0), (0, 3), (4, 11), (12, 16), (0, 0)]
    seq = [None, 0, None, 1, 1, 1, None]
    assert span_targets(offsets, seq, 4, 16) == (4, 5)
    assert span_targets(offsets, seq, 40, 45) == (-1, -1)  # truncated away


def test_reader_generator_picks_best_span_and_cites_it() -> None:
    reader = ScriptedReader({"Rollo": 0.8, "Paris": 0.6})
    assert is_reader(reader)
    gen = ExtractiveGenerator(reader, reader_threshold=0.5)
    passages = [{"text": "Paris is in France."}, {"text": PASSAGE}]
    answer = gen.generate("Who swore fealty?", passages)
    assert answer.used == [1]
    assert answer.text == "Rollo\n\nTheir leader Rollo swore fealty to Charles III."


def test_reader_generator_abstains_below_threshold() -> None:
    gen = ExtractiveGenerator(ScriptedReader({"Rollo": 0.2}), reader_threshold=0.5)
    with pytest.raises(ValueError, match="reader threshold"):
        gen.generate("Who swore fealty?", [{"text": PASSAGE}])
    with pytest.raises(ValueError, match="no answer span"):
        gen.generate("Who swore fealty?", [{"text": "Nothing here."}])
    # plain RAG: no abstention, the best span answers whatever its score
    assert generate_answer(gen, "Who swore fealty?", [{"text": PASSAGE}], abstain=False).text.startswith("Rollo")
    # a how / why question is answered by sentences, not a span: the reader's floor is not its to pass
    answer = gen.generate("How did the Normans come to France?", [{"text": PASSAGE}])
    assert "Rollo swore fealty" in answer.text and answer.used == [0]


def test_ambiguous_evidence_is_held_to_the_refine_floor() -> None:
    gen = ExtractiveGenerator(ScriptedReader({"Rollo": 0.3}), reader_threshold=0.1, refine_reader_threshold=0.5)
    question, passages = "Who swore fealty?", [{"text": PASSAGE}]
    assert generate_answer(gen, question, passages).text.startswith("Rollo")  # CORRECT evidence: 0.3 >= 0.1
    with pytest.raises(ValueError, match=r"reader threshold \(0.300 < 0.500\)"):
        generate_answer(gen, question, passages, ambiguous=True)
    assert generate_answer(gen, question, passages, abstain=False, ambiguous=True).text.startswith("Rollo")
    # without a refine floor, AMBIGUOUS evidence keeps the reader's own
    same = ExtractiveGenerator(ScriptedReader({"Rollo": 0.3}), reader_threshold=0.1)
    assert generate_answer(same, question, passages, ambiguous=True).text.startswith("Rollo")


def test_the_refine_floor_is_drawn_on_ambiguous_questions_alone() -> None:
    from fastcrag.fitting.calibrate import Observation, RefineFloor, choose_reader_threshold, declines

    # CORRECT band (0.9): spans do not separate; AMBIGUOUS band (0.6): the answerable ones read 0.8, the rest 0.1
    obs = [Observation("answerable", 0.9, "", "", 0.5, f"c{i}") for i in range(20)]
    obs += [Observation("unanswerable", 0.9, "", "", 0.5, f"u{i}") for i in range(20)]
    obs += [Observation("answerable", 0.6, "", "", 0.8, f"a{i}") for i in range(20)]
    obs += [Observation("unanswerable", 0.6, "", "", 0.1, f"n{i}") for i in range(20)]
    floor, why = choose_reader_threshold(obs, 0.4, 0.9, upper=0.8)
    assert floor is not None and 0.1 < floor <= 0.8 and "refine_reader_threshold" in why and "AMBIGUOUS" in why
    refine = RefineFloor(0.8, floor)
    assert declines(obs[-1], 0.4, 0.0, refine) and not declines(obs[40], 0.4, 0.0, refine)
    assert not declines(obs[20], 0.4, 0.0, refine)  # graded CORRECT: the reader's own floor (0) applies
    assert choose_reader_threshold(obs[:40], 0.4, 0.9, upper=0.8) == (None, "")  # no AMBIGUOUS question


def test_the_reader_floor_is_not_asked_of_questions_answered_by_sentences() -> None:
    from fastcrag.fitting.calibrate import read_score

    reader = ScriptedReader({"Rollo": 0.3})
    assert read_score(reader, "Who swore fealty?", [PASSAGE]) == 0.3
    assert read_score(reader, "Why did Rollo swear fealty?", [PASSAGE]) is None  # sentences answer it
    # over documentation (a titled chunk first) no span declines: the grader's sentences answer below the floor
    titled = f"Normandy \u203a Rollo\n\n{PASSAGE}"
    assert read_score(reader, "Rollo swore fealty to what king?", [titled]) is None
    assert read_score(reader, "Rollo swore fealty to what king?", [PASSAGE]) == 0.3
    assert read_score(reader, "Who swore fealty?", [titled]) is None
    assert read_score(reader, "Who swore fealty?", [PASSAGE], source="normandy.md") is None  # a markup page's chunk
    assert read_score(reader, "Who swore fealty?", [PASSAGE], source="normandy.txt") == 0.3


def test_answer_with_sentence_finds_the_sentence_of_the_span() -> None:
    text = "Rollo came.  Later,\nRollo swore fealty. Rollo died."
    at = text.index("Rollo swore")
    assert answer_with_sentence(Span("Rollo", at, at + 5, 0.9), text) == "Rollo\n\nLater, Rollo swore fealty."
    assert answer_with_sentence(Span("Rollo came.", 0, 11, 0.9), text) == "Rollo came."


def test_encoded_pool_is_reused_verbatim(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from fastcrag.fitting.mix import Pair
    from fastcrag.fitting.train_loop import _encoded_pool
    from fastcrag.retrieval.embeddings import packaged_minilm_path

    tok = AutoTokenizer.from_pretrained(str(packaged_minilm_path()), local_files_only=True)
    pairs = [
        Pair("Who swore fealty?", PASSAGE, 1.0, "t:own", "g", "Rollo"),
        Pair("Who swore fealty?", "Steam engines use heat.", 0.0, "t:random", "g"),
        Pair("Who swore fealty?", "Answer-sentence data has no span.", 1.0, "t:pos", "g"),
        Pair("Where is Paris?", "A long text " * 40 + "Paris is in France.", 1.0, "t:own", "g", "France"),
    ]
    path = tmp_path / "encoded.npz"
    first = _encoded_pool(path, tok, pairs, 32)
    assert path.exists() and first.keep == [0, 1, 2]  # the last answer was truncated away: dropped
    assert first.starts[1] == first.ends[1] == 0 and first.starts[2] == -100
    s, e = first.starts[0], first.ends[0]
    assert tok.decode(first.input_ids[0][s : e + 1]) == "rollo"
    assert _encoded_pool(path, tok, pairs, 32) == first


def test_caching_wrapper_keeps_the_reader() -> None:
    from fastcrag.grading.reranker import CachingReranker

    wrapped = CachingReranker(ScriptedReader({"Rollo": 0.8}))
    assert is_reader(wrapped)
    span = wrapped.read("Who?", [PASSAGE])[0]
    assert span is not None and span.text == "Rollo"
    plain = CachingReranker(ScriptedReranker({}))
    assert not is_reader(plain) and plain.read("Who?", ["x"]) == [None]


def test_length_batches_sort_by_length_and_bound_padding() -> None:
    from fastcrag.grading.onnx_grader import length_batches

    lengths = [5, 50, 48, 120, 118, 10, 9]
    batches = length_batches(lengths, max_batch=32)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        width = max(lengths[i] for i in b)
        assert width * len(b) <= 1.15 * sum(lengths[i] for i in b) + 1e-9 or len(b) == 1
    assert [len(b) for b in length_batches([7] * 10, max_batch=4)] == [4, 4, 2]
    assert length_batches([], max_batch=4) == []


def test_a_factoid_keeps_its_span_and_its_prose_sentence() -> None:
    gen = ExtractiveGenerator(ScriptedReader({"Rollo": 0.8}), reader_threshold=0.5)
    answer = gen.generate("Who was their leader?", [{"text": PASSAGE, "score": 0.9}])
    assert answer.text == "Rollo\n\nTheir leader Rollo swore fealty to Charles III." and answer.used == [0]


def test_a_span_in_a_fragment_gives_way_to_the_first_prose_sentence() -> None:
    table = "Note: the table below. + + + | Operation | Result | | del s[i] | removes item i |"
    passages = [{"text": table, "score": 0.9}, {"text": "Deletion removes the binding of a name.", "score": 0.6}]
    answer = ExtractiveGenerator(ScriptedReader({"del s[i]": 0.8}), reader_threshold=0.5).generate("What?", passages)
    assert answer.text == "Deletion removes the binding of a name." and answer.used == [1]


def test_a_span_in_the_prose_a_grammar_block_runs_into_keeps_its_span() -> None:
    page = 'The "pass" statement pass_stmt ::= "pass" "pass" is a null operation; nothing happens.'
    answer = ExtractiveGenerator(ScriptedReader({"null operation": 0.8})).generate("Pass is?", [{"text": page}])
    assert answer.text == 'null operation\n\n"pass" is a null operation; nothing happens.'


def test_a_fragment_never_changes_whether_the_reader_abstains() -> None:
    table = "+ + + | Operation | Result | | del s[i] | removes item i |"
    gen = ExtractiveGenerator(ScriptedReader({"del s[i]": 0.3}), reader_threshold=0.5)
    with pytest.raises(ValueError, match="reader threshold"):
        gen.generate("What?", [{"text": table, "score": 0.9}, {"text": "Deletion removes a binding.", "score": 0.6}])
