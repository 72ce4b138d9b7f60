"""Calibrated thresholds: loading and validation of calibration.json."""

from __future__ import annotations

import functools
import hashlib
import io
import json
import math
import os
import re
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, model_validator

PACKAGED_CALIBRATION = Path(__file__).resolve().parent / "calibration.json"


class CalibrationError(ValueError):
    """calibration.json is missing, unreadable or invalid; the message names the file."""


class CalibrationSample(BaseModel):
    """The questions a calibration's thresholds were drawn on, as fields (its `data` says the same in words)."""

    questions: str | None = Field(None, description="The labelled questions: a dataset or file name.")
    classes: list[str] = Field(default_factory=list, description="The question classes, in sampling order.")
    off_corpus: str | None = Field(
        None,
        description="`python -m lab calibrate`: the dataset whose articles outside the corpus ask the off-corpus "
        "class.",
    )
    per_class: int | None = Field(
        None,
        ge=1,
        description="`python -m lab calibrate`: questions drawn per class, class i with seed + i (None: no per-class "
        "sample; `fastcrag fit` calibrates on every usable question).",
    )
    seed: int = Field(description="The seed that drew the sample (calibrate) or split the questions (fit).")
    labelled: int | None = Field(None, ge=0, description="`fastcrag fit`: labelled questions given.")
    calibrated_on: int | None = Field(None, ge=0, description="`fastcrag fit`: questions the thresholds were drawn on.")
    pseudo: int | None = Field(
        None,
        ge=0,
        description="`fastcrag fit`: pseudo-questions made from the corpus (no labels) that the label-free thresholds "
        "were drawn on: the fit's own, or the prior its labels were blended with.",
    )


_SAMPLE_NOTE = re.compile(r"(\d+) questions per class, seed (\d+)")
"""How `python -m lab calibrate` states its sample in `data`: read only from files written before `sample` existed."""


class Calibration(BaseModel):
    """Two thresholds on the reranker score, with the provenance that produced them."""

    reranker_model: str = Field(description="Name of the reranker whose scores these thresholds apply to.")
    reranker_threshold: float = Field(ge=0.0, le=1.0, description="Below: INCORRECT (abstain or rewrite).")
    crag_upper: float = Field(ge=0.0, le=1.0, description="At or above: CORRECT (generate at once).")
    reader_threshold: float | None = Field(
        None, ge=0.0, le=1.0, description="Extractive reader: below this best-span score it abstains (None: never)."
    )
    refine_reader_threshold: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="Extractive reader, AMBIGUOUS band (evidence that needed refining): below this best-span score it "
        "abstains (None: reader_threshold).",
    )
    rerank_weight: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="The grader's share of the candidate order against the first pass's (weighted reciprocal rank "
        "fusion; 1: the grader's order). Bands always read the best grader score.",
    )
    condition_factor: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="A chunk that states no form of a year, ordinal, quarter or month the question names has its "
        "grader score multiplied by this before grading (1: no check; fastcrag.grading.conditions).",
    )
    flare_threshold: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="FLARE mode: a sentence with a token whose probability (under the chat model) is below this is "
        "uncertain and becomes a query (None: the packaged calibration's; `packaged_flare_threshold`).",
    )
    pseudo_shift: float | None = Field(
        None,
        le=0.0,
        description="How much lower, in logits, a real question's evidence grades than a pseudo-question's (the "
        "packaged calibration measures it: the median answerable question against the median cloze question of the "
        "same corpus). A label-free fit lowers its pseudo-questions' grades by it before drawing thresholds (None: "
        "not measured; no shift).",
    )
    answer_floor: float | None = Field(
        None,
        ge=-1.0,
        le=1.0,
        description="An answer whose cosine with the question (`answer_embedder`'s vectors; the better of the message "
        "and its ask) is below this abstains: its meaning is not the question's (None: no check). A property of the "
        "embedder, not of the grader: drawn by `python -m lab.scripts.answer_floor`, kept by `lab calibrate` and "
        "`fastcrag fit`.",
    )
    answer_embedder: str | None = Field(
        None, description="The embedder `answer_floor` was drawn with; under any other the check is off."
    )
    data: str = ""
    sample: CalibrationSample | None = Field(
        None, description="The questions the thresholds were drawn on (None: not recorded)."
    )
    objective: str = ""
    created: str = ""
    metrics: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _sample_from_note(cls, raw: Any) -> Any:
        """A file without `sample` (written before it existed) has it read once from `data`, here and nowhere else.

        `fastcrag eval abstention` leaves a calibration's sample out of its questions: an older calibration.json read
        without its sample would let those questions back in and change the figures silently.
        """
        if isinstance(raw, dict) and raw.get("sample") is None and isinstance(raw.get("data"), str):
            m = _SAMPLE_NOTE.search(raw["data"])
            if m:
                return {**raw, "sample": {"per_class": int(m.group(1)), "seed": int(m.group(2))}}
        return raw

    @model_validator(mode="after")
    def _ordered(self) -> Calibration:
        floors = (self.reader_threshold or 0.0, self.refine_reader_threshold or 0.0)
        if any(math.isnan(v) for v in (self.reranker_threshold, self.crag_upper, *floors)):
            raise ValueError("thresholds must be numbers, not NaN")
        if self.crag_upper < self.reranker_threshold:
            raise ValueError(
                f"crag_upper ({self.crag_upper}) must be >= reranker_threshold ({self.reranker_threshold})"
            )
        return self

    def thresholds(self) -> tuple[float, float]:
        """(reranker_threshold, crag_upper)."""
        return self.reranker_threshold, self.crag_upper


def load_calibration(path: Path | None = None, expected_model: str | None = None) -> Calibration:
    """Read and validate a calibration file.

    Args:
        path: The file; the packaged calibration.json when None.
        expected_model: The loaded reranker's name; a calibration made for another model is refused.

    Raises:
        CalibrationError: the file is missing, not JSON, fails validation, or names another reranker.
    """
    path = path or PACKAGED_CALIBRATION
    try:
        raw = json.loads(path.read_text(encoding="utf-8"), parse_constant=_reject_constant)
        calibration = Calibration.model_validate(raw)
    except FileNotFoundError:
        raise CalibrationError(f"calibration file not found: {path} (run `fastcrag fit`)") from None
    except (OSError, ValueError, ValidationError) as exc:
        raise CalibrationError(f"invalid calibration file {path}: {exc}") from None
    if expected_model is not None and calibration.reranker_model != expected_model:
        raise CalibrationError(
            f"calibration file {path} was made for reranker {calibration.reranker_model!r}, "
            f"but the loaded reranker is {expected_model!r}; run `fastcrag fit` for it"
        )
    return calibration


@functools.cache
def packaged_flare_threshold() -> float:
    """FLARE's confidence threshold in the packaged calibration.json: the one a calibration without its own uses.

    It is a property of the chat model's token probabilities, not of the grader, so a fit (which calibrates the
    grader) keeps it.

    Raises:
        CalibrationError: the packaged file names none.
    """
    value = load_calibration().flare_threshold
    if value is None:
        raise CalibrationError(f"the packaged calibration {PACKAGED_CALIBRATION} names no flare_threshold")
    return value


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a valid threshold")


FIT_DIR = "fit"
"""The folder inside a FAISS index that holds its installed fit (`fastcrag fit --install`)."""


@dataclass(frozen=True)
class IndexFit:
    """A fit installed with an index: its calibration, its fitted grader (None: the base grader was kept)."""

    calibration: Path
    grader: Path | None
    embedder: str


def index_fit(index_dir: Path) -> IndexFit | None:
    """The fit installed in a FAISS index folder, or None when it has none.

    Raises:
        CalibrationError: the fit is incomplete (its record or calibration unreadable, or the grader it names gone).
    """
    folder = index_dir / FIT_DIR
    if not folder.is_dir():
        return None
    try:
        record = json.loads((folder / "fit.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CalibrationError(
            f"the fit installed in {folder} is damaged ({exc}); run `fastcrag fit --install`"
        ) from None
    calibration = folder / "calibration.json"
    grader = folder / "grader" if record.get("grader") else None
    if not calibration.is_file() or (grader is not None and not (grader / "model.onnx").is_file()):
        missing = calibration if not calibration.is_file() else grader / "model.onnx"  # type: ignore[operator]
        raise CalibrationError(f"the fit installed in {folder} is missing {missing}; run `fastcrag fit --install`")
    return IndexFit(calibration, grader, str(record.get("embedder", "")))


def materialise_fit(calibration: dict[str, Any], grader: bytes | None, embedder: str, cache: Path) -> IndexFit:
    """A fit stored as data (a Postgres collection's record) as files under `cache`, keyed by its content.

    The grader arrives as a tar of its folder; it is unpacked once (into a temporary folder renamed into place), with
    tarfile's `data` filter, so no member can land outside its folder.
    """
    blob = json.dumps(calibration, sort_keys=True).encode() + (grader or b"")
    folder = cache / hashlib.sha1(blob).hexdigest()[:16]
    if not (folder / "calibration.json").is_file():
        staged = cache / f".{folder.name}.tmp-{os.getpid()}"
        shutil.rmtree(staged, ignore_errors=True)
        staged.mkdir(parents=True)
        if grader is not None:
            with tarfile.open(fileobj=io.BytesIO(grader)) as tar:
                tar.extractall(staged / "grader", filter="data")
        (staged / "calibration.json").write_text(json.dumps(calibration, indent=2) + "\n", encoding="utf-8")
        try:
            os.replace(staged, folder)
        except OSError:  # another process unpacked the same fit meanwhile
            shutil.rmtree(staged, ignore_errors=True)
    return IndexFit(folder / "calibration.json", folder / "grader" if grader is not None else None, embedder)
