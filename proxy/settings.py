"""Configuration: config.yaml first, then CTXPROXY_* environment variables override it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from strategies.options import (
    KEEP_RECENT,
    FoldOptions,
    ForgetOptions,
    TieredOptions,
    TracebackOptions,
)

LOCAL_CONFIG = Path("config.yaml")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Listen(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)


class Upstream(_Strict):
    name: str
    kind: Literal["llamacpp", "vllm", "ollama", "openai"] = "openai"
    base_url: str
    api_key: str | None = None
    models: list[str] = ["*"]
    context_window: int | None = Field(None, gt=0)
    tokenizer: Literal["tiktoken", "upstream"] = "tiktoken"
    connect_timeout: float = Field(5.0, gt=0)
    read_timeout: float = Field(600.0, gt=0)
    # The whole answer, streamed or not: a server that trickles bytes or keep-alive comments
    # cannot hold a request (and its connection) longer than this.
    total_timeout: float = Field(1800.0, gt=0)
    max_connections: int = Field(128, gt=0)  # this server's own pool
    max_response_bytes: int = Field(64 * 1024 * 1024, gt=0)  # a bigger answer is a 502
    discovery_ttl: float = Field(300.0, ge=0)
    tools: bool = True  # false: this server takes no tools, so ctxproxy_recall is not offered
    # The APIs the server answers itself, so requests in them are forwarded natively; others
    # are translated to chat completions. Unset: all three for llama.cpp, vLLM and Ollama
    # (a 404 makes ctxproxy translate from then on), chat only for `openai`.
    apis: list[Literal["chat", "messages", "responses"]] | None = None

    @field_validator("base_url")
    @classmethod
    def _strip_slash(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return v.rstrip("/")

    def serves(self, model: str) -> bool:
        return model in self.models

    def native(self, api: str) -> bool:
        return api in self.apis if self.apis is not None else self.kind != "openai"


# The strategies' options, checked; their defaults are the strategies' own (strategies/options.py).
class TracebackSettings(_Strict):
    min_chars: int = Field(TracebackOptions.min_chars, ge=0)
    head_lines: int = Field(TracebackOptions.head_lines, ge=0)
    tail_lines: int = Field(TracebackOptions.tail_lines, ge=0)
    keep_recent: int = Field(KEEP_RECENT, ge=0)


class TieredSettings(_Strict):
    keep_recent: int = Field(KEEP_RECENT, ge=0)
    truncate_chars: int = Field(TieredOptions.truncate_chars, ge=0)
    user_min_chars: int = Field(TieredOptions.user_min_chars, ge=0)


class ForgetSettings(_Strict):
    keep_recent: int = Field(KEEP_RECENT, ge=0)
    keep_first: float = Field(ForgetOptions.keep_first, ge=0, lt=1)
    ledger_share: float = Field(ForgetOptions.ledger_share, ge=0, le=0.5)


class FoldSettings(_Strict):
    keep_recent: int = Field(KEEP_RECENT, ge=0)
    min_chars: int = Field(FoldOptions.min_chars, ge=0)


class SlidingWindowSettings(_Strict):
    keep_recent: int = Field(KEEP_RECENT, ge=0)


class CompactionSettings(_Strict):
    pipeline: list[str] = ["traceback", "tiered", "forget"]
    reserve_tokens: int = Field(1024, ge=0)
    safety_margin: float = Field(0.05, ge=0, lt=1)
    trigger: float = Field(1.0, gt=0, le=1)
    target: float = Field(0.5, gt=0, le=1)
    # Share of the room a firing leaves free: the rest is filled back with what was forgotten.
    headroom: float = Field(0.3, ge=0, le=1)
    image_tokens: int = Field(765, ge=0)
    invalid_pairing: Literal["reject", "repair", "pass"] = "reject"
    traceback: TracebackSettings = TracebackSettings()
    tiered: TieredSettings = TieredSettings()
    fold: FoldSettings = FoldSettings()
    forget: ForgetSettings = ForgetSettings()
    sliding_window: SlidingWindowSettings = SlidingWindowSettings()

    @field_validator("pipeline")
    @classmethod
    def _known_strategies(cls, names: list[str]) -> list[str]:
        import strategies  # registers the built-in strategies

        unknown = [n for n in names if n not in strategies.STRATEGIES]
        if unknown:
            known = ", ".join(sorted(strategies.STRATEGIES))
            raise ValueError(f"unknown strategy {unknown[0]!r} (known: {known})")
        return names


class RecallSettings(_Strict):
    enabled: bool = True
    rounds: int = Field(3, ge=1, le=10)  # recall requests per client request, at most
    max_tokens: int = Field(2000, ge=64)  # a recall result's cap, within what the window allows
    max_calls: int = Field(8, ge=1, le=64)  # recall calls answered per client request
    call_seconds: float = Field(1.0, gt=0, le=30)  # one query's search time, at most
    answer_seconds: float = Field(2.0, gt=0, le=60)  # all of one request's searches, at most
    # Messages and Responses exchanges to an upstream that serves them natively go translated
    # to chat completions once their view is folded, so that recall can be offered there;
    # false keeps them native (untouched messages byte for byte) and without recall.
    translate: bool = True


class LimitsSettings(_Strict):
    """Slow clients (proxy/http/slow.py): deadlines for a request's head and body, a floor on
    a body's rate after a grace, and a cap on open connections (lowered to the file
    descriptors the process has) that closes the slowest to make room."""

    head_timeout_s: float = Field(10.0, gt=0)
    body_timeout_s: float = Field(120.0, gt=0)
    body_grace_s: float = Field(5.0, gt=0)
    body_min_bytes_per_s: float = Field(1024.0, gt=0)
    max_connections: int = Field(4096, ge=16)


class Settings(BaseSettings):
    """Everything ctxproxy reads at start. Unknown keys are an error, so typos fail loudly."""

    model_config = SettingsConfigDict(
        env_prefix="CTXPROXY_", env_nested_delimiter="__", extra="forbid"
    )

    listen: Listen = Listen()
    database_url: str = "sqlite:///./ctxproxy.db"
    api_keys: list[str] = []
    admin_key: str | None = None
    # Host names clients may use besides IP addresses and localhost (DNS rebinding guard).
    allowed_hosts: list[str] = []
    max_body_bytes: int = Field(32 * 1024 * 1024, gt=0)
    # One budget for every in-memory cache (prefix memos, converted items, text caches, counts).
    cache_mb: int = Field(64, ge=0)
    upstreams: list[Upstream] = [
        Upstream(name="local", kind="llamacpp", base_url="http://127.0.0.1:8081/v1")
    ]
    compaction: CompactionSettings = CompactionSettings()
    recall: RecallSettings = RecallSettings()
    log_level: str = "info"
    log_content: bool = False  # message text in the access log (privacy: off by default)
    # The client's `user`, `safety_identifier` and `metadata.user_id` forwarded upstream.
    forward_client_identity: bool = False
    limits: LimitsSettings = LimitsSettings()
    # observe: the upstream gets each request as the client sent it; ctxproxy records the view
    # it would have sent (a request's X-Ctxproxy-Mode header chooses for that request).
    mode: Literal["compact", "observe"] = "compact"
    # Who may choose the mode per request by X-Ctxproxy-Mode: `admin`, the operator only (the
    # admin key; with no keys at all, a client connected directly over loopback), or `clients`.
    mode_switch: Literal["admin", "clients"] = "admin"
    # The HTTP client behind each upstream's pool (upstream/pools.py's client_for): aiohttp's, or
    # for comparison a fresh connection per request, or httpx's own, with or without checks.
    upstream_client: Literal["aiohttp", "aiohttp-fresh", "httpx", "httpx-plain"] = "aiohttp"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Environment beats the file, which arrives as init kwargs.
        return env_settings, init_settings

    @field_validator("recall", mode="before")
    @classmethod
    def _recall_switch(cls, v: Any) -> Any:
        return {"enabled": v} if isinstance(v, bool) else v  # `recall: false` turns it off

    def upstream_for(self, model: str) -> Upstream | None:
        exact = next((u for u in self.upstreams if u.serves(model)), None)
        return exact or next((u for u in self.upstreams if u.serves("*")), None)


class ConfigError(Exception):
    """A configuration file or value that cannot be used; the message names the key."""


def load_settings(path: str | os.PathLike[str] | None = None, **overrides: Any) -> Settings:
    """Read a config file and apply env overrides.

    The file is `path`, else $CTXPROXY_CONFIG, else ./config.yaml if present; with none of
    those the embedded defaults apply.
    """
    path = path or os.environ.get("CTXPROXY_CONFIG")
    if path is None and not LOCAL_CONFIG.is_file():
        return _build(Path("<defaults>"), dict(overrides))
    path = Path(path or LOCAL_CONFIG)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError as exc:
        raise ConfigError(f"config file not found: {path}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    data.update(overrides)
    return _build(path, data)


def _build(path: Path, data: dict[str, Any]) -> Settings:
    try:
        return Settings(**data)
    except ValidationError as exc:
        raise ConfigError(_describe(path, exc)) from exc


def _describe(path: Path, exc: ValidationError) -> str:
    lines = [f"{path}: invalid configuration"]
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"])
        lines.append(f"  {key}: {err['msg']}")
    return "\n".join(lines)
