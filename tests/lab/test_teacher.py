"""The teacher pipeline's parts that need no model: the portable pool, carrying weights in parts, the schedule."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fastcrag.fitting.mix import Pair
from lab.scripts.paraphrase_probe import is_same_passage, measure
from lab.training.teacher import Budget, length_batches, pack, read_pool, unpack, write_pool


def test_pool_round_trip_keeps_each_passage_once(tmp_path: Path) -> None:
    shared = "Paris is the capital of France."
    train = [
        Pair("capital of France?", shared, 1.0, "squad11:own", "g1", "Paris"),
        Pair("largest city?", shared, 0.0, "squad11:swap", "g1"),
    ]
    dev = [Pair("a side sentence?", "Another passage.", 0.3, "user:jsonl", "g2")]
    counts = write_pool(tmp_path, train, dev)
    assert counts == {"passages": 2, "pairs": 3, "train": 2, "dev": 1}
    passages, pairs = read_pool(tmp_path)
    assert passages == [shared, "Another passage."]
    assert [(p.question, passages[p.passage], p.label, p.answer, p.split) for p in pairs] == [
        ("capital of France?", shared, 1.0, "Paris", "train"),
        ("largest city?", shared, 0.0, "", "train"),
        ("a side sentence?", "Another passage.", 0.3, "", "dev"),
    ]


@pytest.mark.parametrize("int8", [True, False])
def test_weights_travel_in_parts_and_come_back(tmp_path: Path, int8: bool) -> None:
    from safetensors.numpy import load_file, save_file

    rng = np.random.default_rng(0)
    model = tmp_path / "model"
    model.mkdir()
    weights = {"enc.w": rng.normal(size=(64, 96)).astype(np.float32), "enc.b": rng.normal(size=96).astype(np.float32)}
    save_file(weights, str(model / "model.safetensors"))
    save_file({"relevance.weight": rng.normal(size=(1, 8)).astype(np.float32)}, str(model / "heads.safetensors"))
    (model / "config.json").write_text('{"hidden_size": 96}', encoding="utf-8")
    parts = pack(model, tmp_path / "parts", part_mb=0.004, int8=int8)
    assert len(parts) > 1 and all(p.stat().st_size <= 4_000 for p in parts)
    back = unpack(tmp_path / "parts", tmp_path / "back")
    assert (back / "config.json").read_text(encoding="utf-8") == '{"hidden_size": 96}'
    got = load_file(str(back / "model.safetensors"))
    tolerance = 0.01 if int8 else 0.002  # per-row int8: half a step of max|row| / 127
    for name, w in weights.items():
        assert np.abs(got[name] - w).max() <= tolerance * np.abs(w).max()
    assert set(load_file(str(back / "heads.safetensors"))) == {"relevance.weight"}


def test_schedule_warms_up_then_decays_by_steps_or_clock() -> None:
    b = Budget(total_steps=100, max_minutes=1.0)
    assert b.factor(0, 0.0) < b.factor(4, 0.0) == 1.0  # 5 warm-up steps
    assert b.factor(50, 0.0) == pytest.approx(0.5)
    assert b.factor(10, 45.0) == pytest.approx(0.25)  # the clock is further along than the steps
    assert not b.over(99, 59.0) and b.over(100, 0.0) and b.over(1, 60.0)


def test_length_batches_cover_every_pair_once_in_similar_lengths() -> None:
    lengths = list(range(1000))
    batches = length_batches(lengths, 10, seed=3)
    assert sorted(i for b in batches for i in b) == lengths
    assert max(max(b) - min(b) for b in batches) < 100  # sorted within windows of 500
    assert batches == length_batches(lengths, 10, seed=3)


def test_probe_counts_the_passage_kept_and_its_rank_among_the_others() -> None:
    passage = "Comparisons can be chained arbitrarily: x < y <= z is equivalent to x < y and y <= z."
    pairs = [{"id": "a", "corpus": "python", "how": "example", "question": "q", "reworded": "q2", "passage": passage}]
    same = "Comparisons. Comparisons can be chained arbitrarily: x < y <= z is equivalent to x < y and y <= z."
    assert is_same_passage(same, passage) and not is_same_passage("Unrelated text about strings.", passage)
    candidates = {"a": [same, "other one", "other two"]}

    def score(query: str, texts: list[str]) -> list[float]:
        return [0.6 if t == passage else 0.7 if t == "other one" else 0.1 for t in texts]

    res = measure(pairs, candidates, score, threshold=0.5)["all"]
    assert res == {"n": 1, "kept_reworded": 1.0, "kept_plain": 1.0, "first": 0.0, "mrr": 0.5}


def test_training_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    import torch

    from lab.training.teacher import train_resumable

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = torch.nn.Linear(4, 4)
            self.relevance = torch.nn.Linear(4, 1)

    torch.manual_seed(0)
    x, y = torch.randn(40, 4), torch.randn(40)
    batches = [list(range(i, i + 4)) for i in range(0, 40, 4)]

    def run(model: Tiny) -> dict[str, object]:
        def loss_of(idx: list[int]) -> torch.Tensor:
            return torch.mean((model.relevance(model.encoder(x[idx])).squeeze(-1) - y[idx]) ** 2)

        return train_resumable(
            model, batches, loss_of, tmp_path, lr=1e-2, head_lr_scale=1.0, max_minutes=0, checkpoint_every=3
        )

    whole = Tiny()
    first = run(whole)
    assert first["steps"] == 10 and (tmp_path / "checkpoint.pt").is_file()
    again = Tiny()  # a fresh process: the same command continues, here with nothing left to do
    second = run(again)
    assert second["steps"] == 10
    assert all(torch.equal(a, b) for a, b in zip(whole.state_dict().values(), again.state_dict().values(), strict=True))


def test_a_stopped_run_checkpoints_the_step_under_way_and_continues_to_the_same_weights(tmp_path: Path) -> None:
    import os
    import signal

    import torch

    from lab.training.teacher import CHECKPOINT, train_resumable

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.encoder = torch.nn.Linear(4, 4)
            self.relevance = torch.nn.Linear(4, 1)

    torch.manual_seed(1)
    x, y = torch.randn(40, 4), torch.randn(40)
    batches = [list(range(i, i + 4)) for i in range(0, 40, 4)]

    def run(model: Tiny, out: Path, stop_at: int | None = None) -> dict[str, object]:
        def loss_of(idx: list[int]) -> torch.Tensor:
            if idx[0] == stop_at:
                os.kill(os.getpid(), signal.SIGTERM)  # as `kill PID` or the end of a sitting would
            return torch.mean((model.relevance(model.encoder(x[idx])).squeeze(-1) - y[idx]) ** 2)

        return train_resumable(
            model, batches, loss_of, out, lr=1e-2, head_lr_scale=1.0, max_minutes=0, checkpoint_every=0
        )

    for name in ("stopped", "whole"):
        (tmp_path / name).mkdir()
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit, match="stopped at step 3 of 10"):
        run(Tiny(), tmp_path / "stopped", stop_at=8)  # the third batch starts at pair 8
    assert signal.getsignal(signal.SIGTERM) is before
    assert torch.load(tmp_path / "stopped" / CHECKPOINT, weights_only=False)["step"] == 3
    continued, whole = Tiny(), Tiny()
    assert run(continued, tmp_path / "stopped")["steps"] == 10
    run(whole, tmp_path / "whole")
    for a, b in zip(whole.state_dict().values(), continued.state_dict().values(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def _tiny_base(folder: Path) -> Path:
    """A one-layer BERT encoder with its tokenizer, saved as a teacher run's `--base` folder is."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "what", "is", "a", "tuple", "list", "sequence"]
    folder.mkdir()
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(str(folder))
    config = BertConfig(vocab_size=len(vocab), hidden_size=8, num_hidden_layers=1, num_attention_heads=2)
    BertModel(config).save_pretrained(str(folder))
    return folder


def test_a_snapshot_of_a_run_under_way_reads_back_as_its_checkpointed_teacher(tmp_path: Path) -> None:
    import torch

    from lab.training.teacher import CHECKPOINT, main, teacher_network

    base = _tiny_base(tmp_path / "base")
    trained = teacher_network(base)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.5)  # as training would move them
    run = tmp_path / "run"
    run.mkdir()
    torch.save({"model": trained.state_dict(), "optimizer": {}, "step": 7, "elapsed": 90.0}, run / CHECKPOINT)

    main(["snapshot", str(run), "--base", str(base), "--out", str(tmp_path / "snap")])

    back = teacher_network(tmp_path / "snap").eval()
    trained.eval()
    ids = torch.tensor([[2, 5, 6, 7, 8, 3]])
    assert torch.allclose(back(ids, torch.ones_like(ids)), trained(ids, torch.ones_like(ids)))


def test_the_exported_teacher_grades_in_the_graph_as_it_does_in_torch(tmp_path: Path) -> None:
    import torch
    from transformers import AutoTokenizer

    from fastcrag.grading.reranker import load_reranker
    from lab.training.teacher import main, save_teacher, teacher_network

    base = _tiny_base(tmp_path / "base")
    torch.manual_seed(3)
    teacher = teacher_network(base)
    save_teacher(teacher, AutoTokenizer.from_pretrained(str(base)), tmp_path / "teacher")

    main(["export", str(tmp_path / "teacher"), "--out", str(tmp_path / "onnx"), "--name", "tiny-teacher"])

    grader = load_reranker(str(tmp_path / "onnx"))
    texts = ["a tuple is a sequence", "a list", "what is what is a list a tuple"]
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "teacher"))
    enc = tok(["what is a tuple"] * 3, texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        expected = torch.sigmoid(teacher.eval()(enc["input_ids"], enc["attention_mask"])).tolist()
    assert grader.name == "tiny-teacher"
    assert grader.score("what is a tuple", texts) == pytest.approx(expected, abs=1e-5)


def test_scoring_stopped_midway_keeps_its_scores_and_the_rerun_scores_only_the_rest(tmp_path: Path) -> None:
    import os
    import signal

    import torch
    from transformers import AutoTokenizer

    from lab.training.teacher import teacher_logits, teacher_logits_resumable, teacher_network

    base = _tiny_base(tmp_path / "base")
    torch.manual_seed(5)
    model = teacher_network(base).eval()
    tok = AutoTokenizer.from_pretrained(str(base))
    words = ["what", "is", "a", "tuple", "list", "sequence"]
    qs = [" ".join(words[: 1 + i % 4]) for i in range(12)]
    ps = [" ".join(words[i % 3 :] * (1 + i % 5)) for i in range(12)]
    expected = teacher_logits(model, tok, qs, ps, 32, 4)

    calls: list[int] = []  # the size of each batch the model scores
    sitting_ends = [True]  # once: during the first run's second batch

    def count(_m: object, args: tuple[torch.Tensor, ...], _o: object) -> None:
        calls.append(len(args[0]))
        if sitting_ends and len(calls) == 2:
            sitting_ends.clear()
            os.kill(os.getpid(), signal.SIGTERM)  # as `kill PID` or the end of a sitting would

    partial = tmp_path / "scores.partial.npz"
    model.register_forward_hook(count)
    with pytest.raises(SystemExit, match="stopped with 8 of 12 pairs scored"):
        teacher_logits_resumable(model, tok, qs, ps, 32, 4, partial, key="pool|teacher|32")
    assert partial.is_file()
    calls.clear()

    got = teacher_logits_resumable(model, tok, qs, ps, 32, 4, partial, key="pool|teacher|32")

    assert sum(calls) == 4  # only the pairs the stopped run had not scored
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert not partial.exists()
    calls.clear()
    teacher_logits_resumable(model, tok, qs, ps, 32, 4, partial, key="pool|teacher|32")
    assert sum(calls) == 12  # finished: nothing kept to resume from
