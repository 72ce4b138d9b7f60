"""The limits of `fastcrag serve`, from `FASTRAG_*` environment variables (checked by the CLI before any worker)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ServeSettings(BaseSettings):
    """The server's own limits, from `FASTRAG_*` environment variables (`fastcrag serve` flags set them)."""

    model_config = SettingsConfigDict(env_prefix="FASTRAG_", extra="ignore")

    run_timeout_s: float = Field(
        300.0, gt=0, description="A run still going after this many seconds ends in an abstention saying so."
    )
    max_body_bytes: int = Field(64 * 1024, ge=1024, description="Larger request bodies are refused with 413.")
    cors_origins: str = Field(
        "",
        description="Comma-separated web origins whose pages may call the API from a browser (a chat UI served "
        "elsewhere); `*` for any. Empty: no cross-origin access.",
    )

    auth: str = Field(
        "",
        description="The `langgraph_sdk.Auth` object that authenticates and authorizes every request, as "
        "`/abs/path/auth.py:name` or `module:name` (`fastcrag serve` sets it from langgraph.json's `auth.path`). "
        "Empty: the shared API key (FASTRAG_API_KEY) mode.",
    )

    def origins(self) -> list[str]:
        """The allowed origins, one per comma-separated item."""
        return [o.strip().rstrip("/") for o in self.cors_origins.split(",") if o.strip()]
