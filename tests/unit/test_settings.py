"""Settings come from SENTIMENT_* variables once, typed and checked."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from service.batchconfig import BatchConfig
from service.liveconfig import LiveConfig
from service.settings import RUN_TIME_LIMITS, Settings, apply_user_config


def test_defaults_are_sane(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Settings()
    assert (s.host, s.port, s.metrics_port) == ("127.0.0.1", 8000, 8080)
    assert s.model_path == Path("models/default")
    # Ray's default of 5 ongoing requests would silently cap every batch at 5.
    assert s.max_ongoing_requests >= s.batch.max_batch_texts


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SENTIMENT_MODEL_PATH", "/srv/model")
    monkeypatch.setenv("SENTIMENT_PORT", "9000")
    monkeypatch.setenv("SENTIMENT_NUM_GPUS", "1")
    monkeypatch.setenv("SENTIMENT_BATCH__MAX_BATCH_TEXTS", "64")
    s = Settings()
    assert s.model_path == Path("/srv/model")
    assert s.port == 9000 and s.num_gpus == 1.0
    assert s.batch.max_batch_texts == 64


def test_arguments_beat_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SENTIMENT_PORT", "9000")
    assert Settings(port=9001).port == 9001


def test_bad_value_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SENTIMENT_PORT", "not-a-port")
    with pytest.raises(ValidationError, match="port"):
        Settings()


def test_an_unknown_device_is_refused_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings(device="cuda:1").device == "cuda:1"
    monkeypatch.setenv("SENTIMENT_DEVICE", "tpu")  # else a replica fails deep in torch
    with pytest.raises(ValidationError, match="expected auto, cpu, cuda or cuda:N, got 'tpu'"):
        Settings()


def test_the_http_and_metrics_ports_must_differ() -> None:
    with pytest.raises(ValidationError, match="port and metrics_port are both 8000"):
        Settings(port=8000, metrics_port=8000)


def test_token_budgets_must_fit_one_full_length_text() -> None:
    with pytest.raises(ValidationError, match="max_seq_len"):
        Settings(max_seq_len=512, batch=BatchConfig(micro_batch_tokens=256))


def test_batch_config_rejects_unknown_knobs() -> None:
    with pytest.raises(ValidationError, match="max_batch_size"):
        BatchConfig.model_validate({"max_batch_size": 3})


def test_user_config_round_trips() -> None:
    config = BatchConfig(max_batch_texts=7, batch_wait_timeout_s=0.02)
    assert BatchConfig.model_validate(config.user_config()) == config


def test_a_full_request_must_fit_the_pending_limit() -> None:
    with pytest.raises(ValidationError, match="max_pending_texts"):
        Settings(max_texts_per_request=64, batch=BatchConfig(max_pending_texts=10))


def test_long_texts_are_chunked_and_a_long_review_fits_by_default() -> None:
    s = Settings()
    assert s.long_texts == "chunk" and s.max_text_chars >= 20_000
    # A full request of texts at the window limit is admitted by an idle ingress.
    assert s.max_texts_per_request * s.max_windows <= s.batch.max_pending_texts


def test_windows_must_advance_by_at_least_half_a_window() -> None:
    assert Settings(max_seq_len=64, window_overlap=32).window_overlap == 32
    with pytest.raises(ValidationError, match="window_overlap"):
        Settings(max_seq_len=64, window_overlap=33)


def test_a_user_config_sets_batch_knobs_and_request_limits() -> None:
    base = Settings(request_timeout_s=3.0, max_body_bytes=5000)
    s = apply_user_config(base, {"max_batch_texts": 7, "request_timeout_s": 1.5})
    assert (s.batch.max_batch_texts, s.request_timeout_s) == (7, 1.5)
    assert s.max_body_bytes == 5000  # left out: as args or the environment set it
    assert s.batch.max_pending_texts == BatchConfig().max_pending_texts
    assert set(RUN_TIME_LIMITS) <= set(Settings.model_fields)


def test_a_batch_knob_left_out_of_a_user_config_keeps_its_args_value() -> None:
    base = Settings(batch={"micro_batch_tokens": 1024, "max_batch_tokens": 8192})
    s = apply_user_config(base, {"max_batch_texts": 7})
    assert (s.batch.max_batch_texts, s.batch.micro_batch_tokens) == (7, 1024)
    assert s.batch.max_batch_tokens == 8192  # not the default, as the limits left out
    assert apply_user_config(base, {"request_timeout_s": 2.0}).batch == base.batch


@pytest.mark.parametrize(
    ("user_config", "named"),
    [
        ({"max_body_byte": 100}, "max_body_byte"),  # a typo is refused, not ignored
        ({"request_timeout_s": 0}, "request_timeout_s"),
        ({"max_texts_per_request": 500, "max_pending_texts": 100}, "max_pending_texts"),
        ({"port": 9000}, "port"),  # only the batch knobs and the request limits
    ],
)
def test_a_bad_user_config_is_refused_naming_the_key(
    user_config: dict[str, object], named: str
) -> None:
    with pytest.raises(ValidationError, match=named):
        apply_user_config(Settings(), user_config)


def test_a_refused_user_config_keeps_the_settings_in_force_and_says_why() -> None:
    live = LiveConfig(Settings(request_timeout_s=3.0))
    assert live.apply({"request_timeout_s": 2.0}) and live.current.request_timeout_s == 2.0
    assert not live.apply({"max_body_byte": 100, "request_timeout_s": 0})
    assert live.current.request_timeout_s == 2.0  # the last good one stays
    assert live.refused is not None
    assert "max_body_byte=100: no such key; did you mean 'max_body_bytes'?" in live.refused
    assert "request_timeout_s=0: Input should be greater than 0" in live.refused
    assert live.apply({}) and live.refused is None
    assert live.current.request_timeout_s == 3.0  # left out: the base settings' value
