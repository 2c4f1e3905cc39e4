"""Service configuration: one typed object read from `SENTIMENT_*` environment variables.

Built once at start-up and passed in; nothing reads `os.environ` at import time.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from service.batchconfig import BatchConfig


def check_device(value: str) -> str:
    """`value` if it names where a model can serve (torch reads other strings too, but serves
    on none of them), else ValueError."""
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", value):
        raise ValueError(f"expected auto, cpu, cuda or cuda:N, got {value!r}")
    return value


TorchCompile = Literal["auto", "off", "default", "reduce-overhead"]
COMPILE_MODES: tuple[str, ...] = get_args(TorchCompile)
Dtype = Literal["auto", "float32", "float16", "bfloat16"]
DTYPES: tuple[str, ...] = get_args(Dtype)


# Request limits that a `user_config` may also change at run time, beside the batch knobs: only
# the ingress reads them, so a new deadline or body limit reaches running ingress replicas
# without restarting the model replicas (a change to the application's `args` restarts both).
RUN_TIME_LIMITS = ("max_texts_per_request", "max_text_chars", "max_body_bytes", "request_timeout_s")


class Settings(BaseSettings):
    """Everything the service needs to start; see README for each variable."""

    model_config = SettingsConfigDict(
        env_prefix="SENTIMENT_", env_nested_delimiter="__", extra="ignore"
    )

    model_path: Path = Field(Path("models/default"), description="HF classification model dir.")
    model_name: str | None = Field(None, description="Name reported to clients; default dir name.")
    device: str = Field("auto", description="auto, cpu, cuda or cuda:N.")
    dtype: Dtype = "auto"
    backend: Literal["auto", "torch", "onnx", "onnx-int8", "tensorrt"] = Field(
        "auto",
        description="What runs forwards: torch, onnx (ONNX Runtime FP32), onnx-int8, tensorrt "
        "(ONNX Runtime's TensorRT provider, FP16); auto: the fastest `make parity` recorded "
        "for this device type in the model's onnx/manifest.json, else torch.",
    )
    max_seq_len: int = Field(
        256, ge=8, le=8192, description="Tokens per forward row: a text, or one window of one."
    )
    long_texts: Literal["chunk", "truncate"] = Field(
        "chunk",
        description="A text over max_seq_len tokens: chunk (overlapping windows, probabilities "
        "averaged by window length) or truncate (cut to its first max_seq_len tokens).",
    )
    max_windows: int = Field(
        8,
        ge=1,
        le=64,
        description="Windows one text may use when chunking; a longer text keeps its first "
        "max_windows - 1 windows and its last one, and is flagged truncated.",
    )
    window_overlap: int | None = Field(
        None,
        ge=0,
        description="Tokens consecutive windows share; None: an eighth of max_seq_len.",
    )
    torch_threads: int | None = Field(
        None, ge=1, description="Intra-op threads on CPU (a GPU model replica uses one)."
    )
    torch_compile: TorchCompile = Field(
        "auto",
        description="torch backend only: torch.compile the model with dynamic shapes; "
        "reduce-overhead also replays CUDA graphs on a GPU (rows padded to a few counts so "
        "few graphs are recorded). auto: reduce-overhead for torch on a GPU, falling back to "
        "eager if compiling fails there; off elsewhere. Compiling and recording the graphs "
        "adds 1-2 minutes to a GPU replica's start.",
    )
    forward_in: Literal["auto", "thread", "process"] = Field(
        "auto",
        description="Where forwards run: a thread of the model replica, or a child process "
        "with a GIL of its own (auto: the process on a GPU, where a forward is launch-bound "
        "Python that a busy event loop slows down).",
    )
    parallel_forwards: int | None = Field(
        None,
        ge=1,
        le=16,
        description="Forwards computed at once on the CPU, each on torch_threads / N intra-op "
        "threads, so the cores never wait for the next batch (None: 2 on a CPU replica with at "
        "least 2 threads and forwards in a thread, else 1; a GPU and a forward process take 1).",
    )
    inline_forward_ms: float = Field(
        3.0,
        ge=0.0,
        le=10.0,
        description="A forward the warm-up predicts to take at most this long runs on the event "
        "loop instead of the forward thread (0: never); forwards in a thread only.",
    )
    warmup: bool = Field(True, description="Run every shape bucket once before /readyz is ready.")

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    metrics_port: int = Field(8080, ge=1, le=65535, description="Ray's metrics export port.")
    metrics_refresh_s: float = Field(
        1.0, gt=0.0, description="How often gauges (GPU memory, pending texts) are re-published."
    )
    haproxy: bool = Field(
        True,
        description="`serve` command: Ray's high-throughput ingress (HAProxy), not its Python "
        "proxy. In a cluster the Ray nodes' environment decides (RAY_SERVE_ENABLE_HA_PROXY).",
    )
    access_log: bool = Field(
        False, description="Ray's per-request access log lines (CPU on every request)."
    )
    route_prefix: str = "/"
    app_name: str = "sentiment"

    layout: Literal["two-tier", "colocated"] = Field(
        "two-tier",
        description="`serve` command: model replicas apart from the ingress (two-tier), or "
        "the model inside each ingress replica (colocated, for a small CPU-only machine).",
    )
    num_replicas: int = Field(
        1, ge=1, description="Model replicas (one per GPU); colocated, replicas of both at once."
    )
    num_gpus: float = Field(0.0, ge=0.0, description="GPUs per model replica; 1 in production.")
    num_cpus: float = Field(1.0, ge=0.0, description="CPUs reserved per model replica.")
    ingress_replicas: int = Field(1, ge=1, description="HTTP ingress replicas (scale with cores).")
    ingress_num_cpus: float = Field(0.5, ge=0.0, description="CPUs reserved per ingress replica.")
    ingress_calls_in_flight: int | None = Field(
        None,
        ge=1,
        le=64,
        description="Model calls one ingress replica keeps in flight (None: co-located, one per "
        "parallel forward; two tiers, 1, as the model replica takes calls from every ingress).",
    )
    tokenizer_parallel: bool = Field(
        False,
        description="Let a two-tier ingress replica's tokenizer run a thread per core; off: "
        "replicas scale by process, and one thread pool per core per replica oversubscribes.",
    )
    model_probe_s: float = Field(
        2.0,
        gt=0.0,
        description="After a model replica died with a call: how long an ingress waits for "
        "any model replica to answer before it answers 503 instead of holding requests.",
    )
    max_ongoing_requests: int = Field(
        1024, ge=1, description="Per replica; must exceed batch size or batches never fill."
    )
    max_queued_requests: int = Field(
        2048, ge=-1, description="Ray's own handle queue bound, answered 429 (-1: none)."
    )
    graceful_shutdown_timeout_s: float = Field(30.0, ge=0.0)

    max_texts_per_request: int = Field(64, ge=1)
    max_text_chars: int = Field(
        20_000, ge=1, description="Characters per text (str length, not bytes or tokens)."
    )
    max_body_bytes: int = Field(1_000_000, ge=64)
    request_timeout_s: float = Field(10.0, gt=0.0, description="Deadline; past it, 504.")
    retry_after_s: int = Field(1, ge=0, description="Retry-After sent with 429.")
    api_keys_file: Path | None = Field(
        None,
        description="One API key a line (plain or sha256:<hex>); set: /v1/classify needs "
        "`Authorization: Bearer <key>`. Health, readiness and metrics stay open.",
    )
    allow_pickle: bool = Field(
        False,
        description="Load pickle weights (pytorch_model.bin) when a model has no safetensors. "
        "Pickle can run code: only for model directories you trust.",
    )

    health_stall_s: float = Field(
        30.0,
        gt=0.0,
        description="Model replica is unhealthy when no forward ended for this long while "
        "work waits (Ray then replaces it).",
    )
    health_check_period_s: float = Field(
        10.0, gt=0.0, description="How often Ray calls the model replica's check_health."
    )
    health_check_timeout_s: float = Field(
        30.0, gt=0.0, description="How long Ray waits for one check_health before failing it."
    )
    # Fault injection for tests and drills; off unless set.
    fault_forward_min_texts: int | None = Field(
        None, ge=1, description="Testing only: every forward of at least this many texts raises."
    )
    fault_hang_min_tokens: int | None = Field(
        None, ge=1, description="Testing only: every forward with a text this long (tokens) hangs."
    )
    fault_slow_forward_s: float | None = Field(
        None, gt=0.0, le=60.0, description="Testing only: every forward takes this much longer."
    )
    fault_crash_min_tokens: int | None = Field(
        None,
        ge=1,
        description="Testing only: the forward process exits on every forward with a text this "
        "long (tokens); needs forward_in=process.",
    )

    batch: BatchConfig = Field(default_factory=BatchConfig)

    @field_validator("device")
    @classmethod
    def _known_device(cls, value: str) -> str:
        return check_device(value)

    @model_validator(mode="after")
    def _ports_differ(self) -> Settings:
        if self.port == self.metrics_port:
            raise ValueError(f"port and metrics_port are both {self.port}; they need two ports")
        return self

    @model_validator(mode="after")
    def _budgets_fit(self) -> Settings:
        # Ray rejects an item bigger than the whole batch budget, and one text must fit a forward.
        need = self.max_seq_len
        if self.batch.max_batch_tokens < need or self.batch.micro_batch_tokens < need:
            raise ValueError(
                f"batch.max_batch_tokens ({self.batch.max_batch_tokens}) and "
                f"batch.micro_batch_tokens ({self.batch.micro_batch_tokens}) must be at least "
                f"max_seq_len ({need})"
            )
        if self.window_overlap is not None and self.window_overlap > self.max_seq_len // 2:
            raise ValueError(
                f"window_overlap ({self.window_overlap}) must be at most half of max_seq_len "
                f"({self.max_seq_len}), or windows would barely advance"
            )
        if self.layout == "colocated" and self.ingress_replicas != 1:
            raise ValueError(
                f"ingress_replicas ({self.ingress_replicas}) must be 1 in the colocated layout: "
                "each of its num_replicas replicas is an ingress and a model at once"
            )
        if self.batch.max_pending_texts < self.max_texts_per_request:
            raise ValueError(
                f"batch.max_pending_texts ({self.batch.max_pending_texts}) must be at least "
                f"max_texts_per_request ({self.max_texts_per_request}), or a full request "
                "could never be admitted"
            )
        return self


def apply_user_config(settings: Settings, user_config: dict[str, Any]) -> Settings:
    """`settings` (from args and the environment) with a Ray `user_config` applied: the batch
    knobs and RUN_TIME_LIMITS it holds replace the settings' own, and one it leaves out keeps
    the value from args or the environment. Raises ValidationError, naming the key, on an
    unknown key, a bad value or a combination that cannot work."""
    limits = {key: value for key, value in user_config.items() if key in RUN_TIME_LIMITS}
    knobs = {key: value for key, value in user_config.items() if key not in RUN_TIME_LIMITS}
    batch = {**settings.batch.model_dump(exclude_unset=True), **knobs}
    # Validated as one, so every problem of the dict is named at once.
    return Settings.model_validate({**settings.model_dump(), **limits, "batch": batch})
