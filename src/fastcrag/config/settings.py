"""Settings from `FASTRAG_*` environment variables, and their per-run overrides through the graph context."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import unquote, urlsplit

from pydantic import Field, SecretStr, field_validator
from pydantic.dataclasses import dataclass
from pydantic_settings import BaseSettings, SettingsConfigDict

#: The offline chat model (SmolLM2-135M-Instruct, GGUF, through llama-cpp-python).
SMOLLM2_LLM = "llamacpp:SmolLM2-135M-Instruct"
#: The default generator: the one with the higher truthfulness in `fastcrag eval abstention` (lab/RESULTS.md):
#: extractive -0.175 vs SmolLM2-135M -0.408 on the same 120 questions.
DEFAULT_LLM = "extractive"
#: The default first pass: the one with the higher nDCG@10 in `fastcrag eval retrieval` (lab/RESULTS.md).
RetrievalMode = Literal["hybrid", "dense", "lexical"]
DEFAULT_RETRIEVAL: RetrievalMode = "hybrid"
#: pgvector HNSW: graph degree and build breadth (pgvector's own defaults), the most `maintenance_work_mem` an index
#: build takes (past it the build goes to disk), and the search breadth `FASTRAG_EF_SEARCH` defaults to.
#: `python -m lab bench-store` at 100k MiniLM-shaped vectors measured recall@10 0.87 at ef_search 40 (pgvector's
#: default), 0.95 at 100 and 0.98 at 200; at 1M, 0.84 at 100 and 0.95 at 400 (lab/RESULTS.md, docs/DEPLOY.md).
#: Candidates graded per question, and the band-preserving early exit's batch: the fastest first pass that keeps the
#: quality, by `python -m lab bench-speed` and `fastcrag eval` (lab/RESULTS.md, "The levers against stored quality").
#: With the int8 embedder and the grader-reader v3, top_k 10 holds top_k 15's truthfulness (-0.058) and precision at
#: a retrieval P50 of 142 vs 212 ms (SciFact nDCG@10 0.658 vs 0.640). The int8 embedder at top_k 15 with the early
#: exit in batches of 10, against the fp32 embedder grading all of top_k 20: 128 vs 194 ms, truthfulness -0.150 vs
#: -0.158, SciFact 0.660 vs 0.648; batches of 5 lose 0.03 truthfulness.
TOP_K, GRADE_BATCH = 10, 10
HNSW_M, HNSW_EF_CONSTRUCTION, HNSW_BUILD_MEMORY_MB, DEFAULT_EF_SEARCH = 16, 64, 2048, 100

# The per-run knobs' types and bounds, declared once: `Settings` (the environment), `Context` (a run's overrides)
# and `RunConfig` (what a run uses) all take them from here, so an override is held to the same bounds as a setting.
Rewrites = Annotated[int, Field(ge=0, le=3, description="Query rewrites allowed per question.")]
StripMinTokens = Annotated[int, Field(ge=0, le=64, description="Shorter kept strips keep their chunk.")]
Threshold = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
TopN = Annotated[int, Field(ge=1, le=20, description="Passages handed to the generator.")]
Message = Annotated[str, Field(min_length=1, description="The answer given on abstention.")]
RunMode = Annotated[
    Literal["crag", "flare"],
    Field(
        description="crag: one answer from the graded evidence; flare: active retrieval, sentence by sentence, for "
        "sentences the chat model is unsure of (a chat model that returns token log-probabilities)."
    ),
]
FlareRetrievals = Annotated[int, Field(ge=0, le=8, description="FLARE: active retrievals per answer.")]
FlareSentences = Annotated[int, Field(ge=1, le=32, description="FLARE: sentences per answer.")]
FlareQuery = Annotated[
    Literal["masked", "question"],
    Field(
        description="FLARE: how an uncertain sentence becomes a query: the sentence without its low-confidence words "
        "(masked), or a question for them written by the chat model under a JSON schema (question)."
    ),
]


class Settings(BaseSettings):
    """Process-wide configuration, read from the environment (prefix `FASTRAG_`)."""

    model_config = SettingsConfigDict(env_prefix="FASTRAG_", extra="ignore")

    index_dir: Path | None = Field(None, description="Index folder; the embedded Python-reference index when unset.")
    data: Path | None = Field(
        None,
        description="Evaluation data folder (`squad2-dev/`, `train/squad11-train/`, `scifact/`): where `fastcrag "
        "eval` finds the data its options do not name; unset, those options are required.",
    )
    embedder: str = Field(
        "",
        description="Embedder: `onnx-int8` (the packaged int8 export, the default when empty), `sentence-transformers` "
        "(fp32), or a model folder. Indexes record it and refuse another.",
    )
    store: str = Field(
        "",
        description="A Postgres URL (postgresql://...) to retrieve from Postgres + pgvector; the FAISS folder "
        "(index_dir) when empty.",
    )
    collection: str = Field(
        "default",
        min_length=1,
        max_length=63,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="The index name: one collection per name in a Postgres store; a run reads only this one.",
    )
    ef_search: int = Field(
        DEFAULT_EF_SEARCH,
        ge=10,
        le=1000,
        description="pgvector HNSW ef_search, at least 2 x top_k per query: recall against speed (at 1M vectors "
        "recall@10 is about 0.84 at 100, 0.95 at 400).",
    )
    checkpoints: str = Field(
        "",
        description="Where threads keep their history: a Postgres URL, or a SQLite file (the user's data folder "
        "when empty).",
    )
    api_key: SecretStr | None = Field(
        None, description="Bearer key `fastcrag serve` requires on every route but /ok (required off loopback)."
    )
    reranker: str = Field(
        "", description="Reranker: a local folder, a packaged grader's name, a cached model name, or `bi-encoder`."
    )
    llm: str = Field(DEFAULT_LLM, description="Generator: `provider:model` (init_chat_model) or `extractive`.")
    calibration: Path | None = Field(None, description="calibration.json; the packaged one when unset.")
    html_main_content: bool = Field(
        False, description="Index an HTML page's main content only, as trafilatura finds it (off: less its furniture)."
    )
    crag_enabled: bool = Field(
        True, description="False: no correction; abstain below the threshold, or plain RAG with `plain`."
    )
    plain: bool = Field(
        False,
        description="With crag_enabled false: plain RAG, no grading and no abstention; the top_n reranked "
        "candidates go to the generator whatever their band (false: threshold-only, abstain below the threshold).",
    )
    crag_max_rewrites: Rewrites = 1
    crag_strip_min_tokens: StripMinTokens = 6
    mode: RunMode = "crag"
    flare_max_retrievals: FlareRetrievals = 2
    flare_max_sentences: FlareSentences = 6
    flare_query: FlareQuery = "masked"
    retrieval: RetrievalMode = Field(
        DEFAULT_RETRIEVAL,
        description="First-pass retrieval: dense, lexical (BM25 over FAISS, full-text search over Postgres) or hybrid "
        "(both, fused by RRF).",
    )
    top_k: int = Field(TOP_K, ge=1, le=200, description="Candidates retrieved and reranked.")
    grade_batch: int = Field(
        GRADE_BATCH,
        ge=0,
        le=200,
        description="Candidates graded per batch, in first-pass order; grading stops once one clears crag_upper (the "
        "band is CORRECT whatever the rest would score; the rest are UNGRADED in the trace). 0: all in one batch.",
    )
    top_n: TopN = 3
    chunk_tokens: int = Field(128, ge=16, le=512, description="Chunk size in embedder tokens.")
    chunk_overlap: int = Field(24, ge=0, le=256, description="Token overlap between consecutive chunks.")
    ray_embed_actors: int = Field(
        0,
        ge=0,
        le=10000,
        description="`fastcrag index --ray`: embedding actors (one model load each); 0: one per GPU when the Ray "
        "cluster has GPUs (ray_num_gpus each), else one per CPU.",
    )
    ray_num_gpus: float = Field(
        1.0, gt=0, le=8, description="`fastcrag index --ray`: GPUs each embedding actor takes on a cluster with GPUs."
    )
    ray_writers: int = Field(
        2, ge=1, le=256, description="`fastcrag index --ray`: concurrent Postgres writers (one connection each)."
    )
    abstain_message: Message = "I don't know."
    max_question_chars: int = Field(4000, ge=1, description="Longer questions are refused (abstain).")
    llm_timeout_s: float = Field(120.0, gt=0, description="Limit for one chat-model call.")
    max_new_tokens: int = Field(256, ge=8, le=4096, description="Generation length limit.")

    @field_validator("chunk_overlap")
    @classmethod
    def _overlap_below_size(cls, v: int, info: Any) -> int:
        size = info.data.get("chunk_tokens", 128)
        if v >= size:
            raise ValueError(f"chunk_overlap ({v}) must be smaller than chunk_tokens ({size})")
        return v

    @field_validator("index_dir", "calibration")
    @classmethod
    def _expand(cls, v: Path | None) -> Path | None:
        return v.expanduser() if v is not None else None


def is_postgres_url(value: str) -> bool:
    """Whether a store or checkpoints setting names a Postgres database."""
    return value.startswith(("postgresql://", "postgres://", "postgresql+psycopg://"))


def redact_url(url: str) -> str:
    """A database URL fit for logs, traces and errors: any password (and query-string password) replaced."""
    url = re.sub(r"(://[^/@:]*):[^/]*@", r"\1:***@", url)
    return re.sub(r"(?i)(password=)[^&\s]*", r"\1***", url)


def url_passwords(url: str) -> set[str]:
    """The password of a database URL (`postgresql://user:pw@...`) or conninfo string (`password=pw ...`).

    As written and percent-decoded; empty when it has none.
    """
    try:
        password = urlsplit(url).password or ""
    except ValueError:
        password = ""
    if not password and (match := re.search(r"(?:^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", url)):
        password = match.group(1).strip("'")
    return {p for p in (password, unquote(password)) if p}


def redact_message(message: str, url: str) -> str:
    """An error message fit to show, on one line: URLs in it redacted, and `url`'s password wherever it appears."""
    message = redact_url(message.replace(url, redact_url(url)))
    for password in url_passwords(url):
        message = message.replace(password, "***")
    return " ".join(message.split())


@dataclass(frozen=True)
class Context:
    """Per-run overrides (LangGraph `context_schema`): any field left as None takes the setting or calibration."""

    crag_enabled: bool | None = None
    plain: bool | None = None
    crag_max_rewrites: Rewrites | None = None
    crag_strip_min_tokens: StripMinTokens | None = None
    reranker_threshold: Threshold | None = None
    crag_upper: Threshold | None = None
    top_n: TopN | None = None
    abstain_message: Message | None = None
    mode: RunMode | None = None
    flare_max_retrievals: FlareRetrievals | None = None
    flare_max_sentences: FlareSentences | None = None
    flare_query: FlareQuery | None = None
    flare_threshold: Threshold | None = None


KNOBS = tuple(f.name for f in fields(Context))
"""The per-run knobs, in declaration order."""
THRESHOLDS = ("reranker_threshold", "crag_upper", "flare_threshold")
"""The knobs whose defaults come from calibration.json; every other knob defaults to the setting of its name."""


@dataclass(frozen=True)
class RunConfig:
    """The settings one run uses, after context overrides were applied to settings and calibration.

    With `crag_enabled` false, `plain` chooses between the two uncorrected paths: threshold-only (false: abstain
    below `reranker_threshold`, else generate) and plain RAG (true: always generate from the top_n candidates).
    `plain` has no effect while `crag_enabled` is true. `mode` flare answers sentence by sentence with active
    retrieval (never under plain RAG); `flare_threshold` (calibration.json) is the token probability below which a
    sentence is uncertain. Not knobs: `grade_batch` (a setting) grades candidates in
    batches until one clears `crag_upper`; `rerank_weight` (calibration.json) orders them: the grader's order mixed
    with the first pass's; `condition_factor` (calibration.json) scores down chunks lacking a condition the question
    names (a year, an edition, a quarter, a month); `answer_floor` (calibration.json, under the embedder it was drawn
    with) is the cosine of question and answer below which a CRAG answer abstains (None: no check).
    """

    crag_enabled: bool
    plain: bool
    crag_max_rewrites: Rewrites
    crag_strip_min_tokens: StripMinTokens
    reranker_threshold: Threshold
    crag_upper: Threshold
    top_n: TopN
    abstain_message: Message
    mode: RunMode
    flare_max_retrievals: FlareRetrievals
    flare_max_sentences: FlareSentences
    flare_query: FlareQuery
    flare_threshold: Threshold
    max_question_chars: int
    grade_batch: int = 0
    rerank_weight: Threshold = 1.0
    condition_factor: Threshold = 1.0
    answer_floor: float | None = None

    @property
    def plain_rag(self) -> bool:
        """Whether this run is plain RAG: CRAG disabled and `plain` set (no grading, no abstention)."""
        return self.plain and not self.crag_enabled

    @property
    def flare(self) -> bool:
        """Whether this run answers in FLARE mode (plain RAG never does: it grades nothing)."""
        return self.mode == "flare" and not self.plain_rag


def as_context(context: Any) -> Context:
    """A run's context as a `Context`: a mapping's known keys (checked against the knobs' bounds), or no overrides.

    Raises:
        ValueError: a value is out of its knob's bounds.
    """
    if isinstance(context, Context):
        return context
    if isinstance(context, dict):
        return Context(**{k: v for k, v in context.items() if k in KNOBS})
    return Context()


def resolve(
    settings: Settings,
    thresholds: tuple[float, float],
    context: Any,
    rerank_weight: float = 1.0,
    condition_factor: float = 1.0,
    flare_threshold: float = 0.0,
    answer_floor: float | None = None,
) -> RunConfig:
    """Merge settings, calibration (thresholds, order, condition check, FLARE's confidence, answer floor), context.

    `flare_threshold` 0 (a caller that reads no calibration) makes every sentence confident: no active retrieval.

    Raises:
        ValueError: an override is out of its bounds, or the thresholds are out of order.
    """
    ctx = as_context(context)
    calibrated = dict(zip(THRESHOLDS, (*thresholds, flare_threshold), strict=True))
    defaults = {**{k: getattr(settings, k) for k in KNOBS if k not in THRESHOLDS}, **calibrated}
    merged = {k: defaults[k] if getattr(ctx, k) is None else getattr(ctx, k) for k in KNOBS}
    if not (0.0 <= merged["reranker_threshold"] <= merged["crag_upper"] <= 1.0):
        lower, upper = merged["reranker_threshold"], merged["crag_upper"]
        raise ValueError(f"thresholds must satisfy 0 <= reranker_threshold <= crag_upper <= 1, got {lower}, {upper}")
    return RunConfig(
        max_question_chars=settings.max_question_chars,
        grade_batch=settings.grade_batch,
        rerank_weight=rerank_weight,
        condition_factor=condition_factor,
        answer_floor=answer_floor,
        **merged,
    )
