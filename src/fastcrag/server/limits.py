"""The limits of `fastcrag serve`, from `FASTRAG_*` environment variables (checked by the CLI before any worker)."""

from __future__ import annotations

import os

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ServeSettings(BaseSettings):
    """The server's own limits, from `FASTRAG_*` environment variables (`fastcrag serve` flags set them)."""

    model_config = SettingsConfigDict(env_prefix="FASTRAG_", extra="ignore")

    run_timeout_s: float = Field(
        300.0, gt=0, description="A run still going after this many seconds ends in an abstention saying so."
    )
    max_body_bytes: int = Field(64 * 1024, ge=1024, description="Larger request bodies are refused with 413.")
    max_concurrent_runs: int = Field(
        os.cpu_count() or 1,
        ge=0,
        description="Graph runs one worker executes at once (default: one per core); more wait their turn in arrival "
        "order, within the run timeout. 0: no limit (every run shares the cores at once).",
    )
