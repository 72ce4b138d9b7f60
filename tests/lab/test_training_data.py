"""The grader's training pool: the packaged mix's readers and the lab's user data, on tiny inline fixtures."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from fastcrag.fitting.mix import (
    Article,
    Pair,
    PoolConfig,
    QAItem,
    answer_sentence_index,
    beir_pairs,
    chunk_words,
    contains_any,
    is_dev_group,
    load_beir,
    load_squad,
    perturb_passage,
    read_pairs,
    sentence_windows,
    split_pool,
    split_sentences,
    squad_pairs,
    swap_question,
    write_pairs,
)
from lab.training.pool import build_pool, detect_format, jsonl_pairs, user_pairs

PARA_A = (
    "The Eiffel Tower was completed in 1889. It was designed by the company of Gustave Eiffel. "
    "The tower is 330 metres tall."
)
PARA_B = "Paris is the capital of France. The Louvre opened in 1793 and holds the Mona Lisa."
PARA_C = "Bananas are yellow. They grow in tropical regions such as Ecuador."

SQUAD = {
    "version": "v2.0",
    "data": [
        {
            "title": "Paris",
            "paragraphs": [
                {
                    "context": PARA_A,
                    "qas": [
                        {
                            "id": "q1",
                            "question": "When was the Eiffel Tower completed?",
                            "answers": [{"text": "1889", "answer_start": 34}],
                        },
                        {
                            "id": "q2",
                            "question": "When was the Eiffel Tower demolished?",
                            "answers": [],
                            "is_impossible": True,
                            "plausible_answers": [{"text": "1889", "answer_start": 34}],
                        },
                    ],
                },
                {
                    "context": PARA_B,
                    "qas": [
                        {
                            "id": "q3",
                            "question": "When did the Louvre open?",
                            "answers": [{"text": "1793", "answer_start": 48}],
                        }
                    ],
                },
            ],
        },
        {
            "title": "Banana",
            "paragraphs": [
                {
                    "context": PARA_C,
                    "qas": [
                        {
                            "id": "q4",
                            "question": "What colour are bananas?",
                            "answers": [{"text": "yellow", "answer_start": 12}],
                        }
                    ],
                }
            ],
        },
    ],
}

ALL_ON = PoolConfig(
    p_deleted=1.0,
    p_same_article=1.0,
    p_random=1.0,
    p_snippet=1.0,
    p_relation=1.0,
    p_perturbed=1.0,
    p_swap=1.0,
    p_chunk=1.0,
    squad2_unanswerable_repeat=2,
)


@pytest.fixture
def squad_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(SQUAD), encoding="utf-8")
    return path


@pytest.fixture
def beir_dir(tmp_path: Path) -> Path:
    root = tmp_path / "beir"
    (root / "qrels").mkdir(parents=True)
    docs = [
        {"_id": "d1", "title": "Aspirin", "text": "Aspirin reduces the risk of heart attack."},
        {"_id": "d2", "title": "Statins", "text": "Statins lower cholesterol and heart risk."},
        {"_id": "d3", "title": "Vitamin C", "text": "Vitamin C does not cure the common cold."},
    ]
    with gzip.open(root / "corpus.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(json.dumps(d) for d in docs) + "\n")
    (root / "queries.jsonl").write_text(
        json.dumps({"_id": "1", "text": "aspirin lowers heart attack risk"})
        + "\n"
        + json.dumps({"_id": "2", "text": "vitamin c cures colds"})
        + "\n",
        encoding="utf-8",
    )
    qrels = "query-id\tcorpus-id\tscore\n1\td1\t1\n2\td3\t1\n"
    (root / "qrels" / "train.tsv").write_text(qrels, encoding="utf-8")
    return root


def test_split_sentences_and_answer_index() -> None:
    sents = split_sentences(PARA_A)
    assert len(sents) == 3
    assert answer_sentence_index(sents, ["330 metres"]) == 2
    assert answer_sentence_index(sents, ["not there"]) is None


def test_contains_any_ignores_case_and_spacing() -> None:
    assert contains_any("Completed in  1889.", ["completed in 1889"])
    assert not contains_any("nothing", ["", "  "])


def test_load_squad_reads_v2_flags(squad_file: Path) -> None:
    arts = load_squad(squad_file)
    assert [a.title for a in arts] == ["Paris", "Banana"]
    q2 = arts[0].questions[1]
    assert q2.impossible and q2.answers == [] and q2.paragraph == 0


def test_squad_pairs_makes_every_kind(squad_file: Path) -> None:
    arts = load_squad(squad_file)
    pairs = squad_pairs(arts, ALL_ON, random.Random(0), source="t")
    kinds = {p.source for p in pairs}
    expected = {"own", "deleted", "same_article", "snippet_pos", "snippet_neg", "relation", "chunk", "unanswerable"}
    assert {f"t:{k}" for k in expected} <= kinds
    for p in pairs:
        if p.source == "t:deleted":
            assert "1889" not in p.passage and p.label == 0.0
        if p.source == "t:same_article":
            assert p.passage == (PARA_B if "Eiffel" in p.question else PARA_A) and p.label == 0.0
        if p.label == 1.0:
            assert p.answer and p.answer.lower() in p.passage.lower()
        else:
            assert p.answer == ""
        assert p.group.startswith("t:")
    assert sum(p.source == "t:unanswerable" for p in pairs) == 2
    assert all(p.passage == PARA_A for p in pairs if p.source == "t:own" and "Eiffel" in p.question)


def test_negatives_never_hold_the_answer(squad_file: Path) -> None:
    arts = load_squad(squad_file)
    answers = {q.question: q.answers for a in arts for q in a.questions}
    for p in squad_pairs(arts, ALL_ON, random.Random(1), source="t"):
        if p.label == 0.0 and p.source in ("t:deleted", "t:same_article", "t:snippet_neg", "t:relation"):
            assert not contains_any(p.passage, answers[p.question])


def test_perturb_passage_changes_what_the_question_asks_about() -> None:
    art = Article("Paris", [PARA_A, PARA_B])
    rng = random.Random(0)
    # the question names the year: the passage now speaks of another year, the answer is untouched
    out = perturb_passage("Who designed the tower completed in 1889?", PARA_A, ["Gustave Eiffel"], art, rng)
    assert out is not None and "1889" not in out and "Gustave Eiffel" in out
    year = int(next(w for w in out.split() if w.rstrip(".").isdigit() and len(w.rstrip(".")) == 4).rstrip("."))
    assert 1874 <= year <= 1904 and year != 1889
    # an entity the question shares with the passage is replaced by another of the article
    out = perturb_passage("How tall is the Eiffel Tower?", PARA_A, ["330 metres"], art, rng)
    assert out is not None and out != PARA_A and "330 metres" in out
    # an ordinal edition and a quarter
    text = "The 3rd edition was won by Ajax. Sales rose in the first quarter."
    out = perturb_passage("Who won the 3rd edition?", text, ["Ajax"], Article("x", [text]), rng)
    assert out is not None and "3rd" not in out and "Ajax" in out
    out = perturb_passage("How did sales do in the first quarter?", text, ["rose"], Article("x", [text]), rng)
    assert out is not None and "first quarter" not in out
    # the answer itself is never the thing changed; nothing shared, nothing to change
    assert perturb_passage("When was it completed?", PARA_A, ["1889"], art, rng) is None


def test_sentence_windows_cover_one_and_two_sentences() -> None:
    assert sentence_windows(["a", "b", "c"]) == [(0, 1), (0, 2), (1, 2), (1, 3), (2, 3)]


def test_swap_question_uses_entity_absent_from_paragraph() -> None:
    art = Article("Paris", [PARA_A, PARA_B], [QAItem("When was the Eiffel Tower completed?", ["1889"], 0)])
    out = swap_question("When did Gustave Eiffel design the tower?", art, PARA_A, random.Random(0))
    assert out is not None and out != "When did Gustave Eiffel design the tower?"
    negated = swap_question("when was it built?", Article("x", [PARA_C]), PARA_C, random.Random(0))
    assert negated == "when wasn't it built?"


def test_dev_split_is_by_group_and_stable() -> None:
    pairs = [Pair(f"q{i}", "p", float(i % 2), "s", f"g{i % 40}") for i in range(400)]
    train, dev = split_pool(pairs, 25.0, random.Random(0))
    assert len(train) + len(dev) == 400 and dev
    assert not {p.group for p in train} & {p.group for p in dev}
    assert all(is_dev_group(p.group, 25.0) for p in dev)
    forced = split_pool(pairs, 25.0, random.Random(0), force_train={p.group for p in dev})
    assert forced[1] == []


def test_jsonl_pairs_and_validation(tmp_path: Path) -> None:
    path = tmp_path / "mine.jsonl"
    rows = [
        {"question": "q1", "passage": "text with \u2028 separator", "label": 1},
        {"question": "q2", "passage": "other", "label": 0, "group": "doc7"},
    ]
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    pairs = jsonl_pairs(path)
    assert [p.label for p in pairs] == [1.0, 0.0]
    assert pairs[0].passage == "text with \u2028 separator"
    assert pairs[1].group == "user:doc7"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q", "passage": "p", "label": 3}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="label"):
        jsonl_pairs(bad)


def test_write_read_roundtrip(tmp_path: Path) -> None:
    pairs = [Pair("q\u2028x", "p\u0085y", 1.0, "s:own", "g")]
    write_pairs(tmp_path / "p.jsonl", pairs)
    assert read_pairs(tmp_path / "p.jsonl") == pairs


def test_beir_reading_and_pairs(beir_dir: Path) -> None:
    corpus, queries, qrels = load_beir(beir_dir, "train")
    assert set(corpus) == {"d1", "d2", "d3"} and qrels["1"] == {"d1"} and queries["2"].startswith("vitamin")
    pairs = beir_pairs(beir_dir, "train", random.Random(0), hard_negatives=1, positive_repeat=2)
    pos = [p for p in pairs if p.label == 1.0]
    assert len(pos) == 4
    for p in pairs:
        if p.label == 0.0 and p.question.startswith("aspirin"):
            assert "Aspirin reduces" not in p.passage


def test_detect_format_and_user_pairs(tmp_path: Path, squad_file: Path, beir_dir: Path) -> None:
    jl = tmp_path / "x.jsonl"
    jl.write_text(json.dumps({"question": "q", "passage": "p", "label": 1}) + "\n", encoding="utf-8")
    assert detect_format(squad_file) == "squad"
    assert detect_format(beir_dir) == "beir"
    assert detect_format(jl) == "jsonl"
    with pytest.raises(ValueError):
        detect_format(tmp_path / "notes.txt")
    assert user_pairs(squad_file, ALL_ON, random.Random(0))[0].source.startswith("user:")
    assert {p.source for p in user_pairs(beir_dir, ALL_ON, random.Random(0))} <= {"user:pos", "user:neg"}


def test_build_pool_with_only_user_data(squad_file: Path) -> None:
    train, dev = build_pool(None, ALL_ON, 3, user_data=[squad_file])
    again = build_pool(None, ALL_ON, 3, user_data=[squad_file])
    assert train + dev and (train, dev) == again


def test_chunk_words_cuts_at_sentences() -> None:
    text = " ".join(f"Sentence number {i} is here." for i in range(30))
    chunks = chunk_words(text, 20)
    assert len(chunks) > 3 and all(c.endswith(".") for c in chunks)
    assert " ".join(chunks) == text


def test_fusion_weights_follow_the_informative_signal(tmp_path: Path) -> None:
    import numpy as np

    from lab.training.bench import fit_fusion, fused

    rng = random.Random(3)
    pairs = [Pair(f"q{i}", f"p{i} {'gold' if i % 2 else 'other'}", float(i % 2), "s:x", f"g{i}") for i in range(200)]
    write_pairs(tmp_path / "dev.jsonl", pairs)

    class Grader:  # knows nothing: scores are noise
        def score(self, query: str, texts: list[str]) -> list[float]:
            return [rng.uniform(0.2, 0.8) for _ in texts]

    class Emb:  # questions on one axis; gold passages near it, others away, with noise
        def encode(self, texts: list[str]) -> np.ndarray:
            out = []
            for t in texts:
                angle = rng.gauss(0.3, 0.2) if "gold" in t else rng.gauss(1.2, 0.2)
                out.append([1.0, 0.0] if t.startswith("q") else [np.cos(angle), np.sin(angle)])
            return np.asarray(out)

    a, b, _ = fit_fusion(Grader(), Emb(), tmp_path / "dev.jsonl")
    # rng is seeded (3): the fit is the same on every machine. The embedder's angles separate gold from the rest by
    # 4.5 standard deviations while the grader's scores carry nothing, so its weight must dominate, not merely exceed:
    # measured b = 13.9 against a = 0.029, 480x; 5x is the least that still says "dominates".
    assert b > 5 * abs(a)
    scores = fused([0.9, 0.1], [0.2, 0.95], (a, b, _))
    assert scores[1] > scores[0] and all(0 < s < 1 for s in scores)
