"""Settings problems are named as the user set them: the variable or the flag, with the value."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from service.__main__ import main
from service.envcheck import known_variables, settings_errors, unknown_variables, user_config_errors
from service.settings import Settings, apply_user_config


def errors_for(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], **flags: object) -> list[str]:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as caught:
        Settings(**flags)  # type: ignore[arg-type]
    return settings_errors(caught.value, flags)


def test_a_bad_variable_is_named_with_its_value(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = errors_for(monkeypatch, {"SENTIMENT_BATCH__MAX_PENDING_TEXTS": "lots"})
    assert lines == [
        "SENTIMENT_BATCH__MAX_PENDING_TEXTS='lots': Input should be a valid integer, "
        "unable to parse string as an integer"
    ]


def test_a_bad_flag_is_named_as_the_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    assert errors_for(monkeypatch, {}, metrics_port=0) == [
        "--metrics-port=0: Input should be greater than or equal to 1"
    ]


def test_an_unknown_nested_setting_lists_the_known_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    (line,) = errors_for(monkeypatch, {"SENTIMENT_BATCH__MAX_BATCH_SIZE": "8"})
    assert line.startswith("SENTIMENT_BATCH__MAX_BATCH_SIZE='8': no such setting; known: ")
    assert "SENTIMENT_BATCH__MAX_BATCH_TEXTS" in line


def test_a_rule_across_settings_keeps_its_own_words(monkeypatch: pytest.MonkeyPatch) -> None:
    (line,) = errors_for(monkeypatch, {"SENTIMENT_WINDOW_OVERLAP": "200"})
    assert line.startswith("window_overlap (200) must be at most half of max_seq_len")


def test_a_nested_variable_that_is_not_json_is_named(
    monkeypatch: pytest.MonkeyPatch, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SENTIMENT_BATCH", "notjson")  # pydantic-settings fails before validation
    assert main(["probe", "--model-path", str(tiny_model_dir)]) == 2
    err = capsys.readouterr().err
    assert "SENTIMENT_BATCH is not valid JSON" in err and "SENTIMENT_BATCH__" in err
    assert "Traceback" not in err


def test_an_overlap_wider_than_the_models_windows_stops_the_start(
    monkeypatch: pytest.MonkeyPatch, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Half of max_seq_len passes the settings; the tiny model's 128 positions cut the windows.
    monkeypatch.setenv("SENTIMENT_MAX_SEQ_LEN", "1024")
    monkeypatch.setenv("SENTIMENT_WINDOW_OVERLAP", "200")
    assert main(["probe", "--model-path", str(tiny_model_dir)]) == 2
    err = capsys.readouterr().err
    assert "window_overlap: overlap (200) must be at least 0 and below the width (126)" in err
    assert "cut to the model's 128 positions" in err


def test_user_config_keys_are_named_as_the_config_spells_them() -> None:
    with pytest.raises(ValidationError) as caught:
        apply_user_config(Settings(), {"max_batch_text": 8, "zzz": 1, "request_timeout_s": 0})
    lines = user_config_errors(caught.value)
    assert "request_timeout_s=0: Input should be greater than 0" in lines
    assert "max_batch_text=8: no such key; did you mean 'max_batch_texts'?" in lines
    (unknown,) = [line for line in lines if line.startswith("zzz=1: ")]
    assert "known: max_batch_texts, " in unknown and "request_timeout_s" in unknown  # both kinds


def test_every_known_variable_is_read_by_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    known = known_variables()
    assert "SENTIMENT_REQUEST_TIMEOUT_S" in known
    assert "SENTIMENT_BATCH__MAX_PENDING_TEXTS" in known
    monkeypatch.setenv("SENTIMENT_BATCH__MAX_PENDING_TEXTS", "700")
    monkeypatch.setenv("SENTIMENT_REQUEST_TIMEOUT_S", "3")
    settings = Settings()
    assert (settings.batch.max_pending_texts, settings.request_timeout_s) == (700, 3.0)


def test_typos_are_warned_about_and_everything_else_is_not() -> None:
    environ = {
        "SENTIMENT_REQUEST_TIMEOUT": "5",
        "SENTIMENT_QWERTY": "1",
        "SENTIMENT_PORT": "8000",
        "SENTIMENT_BATCH__NOPE": "1",  # validation names a nested one, with the known names
        "PATH": "/usr/bin",
    }
    assert unknown_variables(environ) == [
        "SENTIMENT_QWERTY is not a setting and is ignored",
        "SENTIMENT_REQUEST_TIMEOUT is not a setting and is ignored "
        "(did you mean SENTIMENT_REQUEST_TIMEOUT_S?)",
    ]


def test_a_misspelt_application_arg_fails_the_build() -> None:
    from service.deployment import build_app

    with pytest.raises(
        ValueError,
        match=r"'request_timeout' is not a service setting \(did you mean 'request_timeout_s'\?\)",
    ):
        build_app({"request_timeout": 5})


def test_the_builder_logs_a_misspelt_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    import logging

    from service.deployment import build_app

    monkeypatch.setenv("SENTIMENT_REQUEST_TIMEOUT", "5")
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("ray.serve")
    logger.addHandler(handler)
    try:
        build_app({})
    finally:
        logger.removeHandler(handler)
    assert any("did you mean SENTIMENT_REQUEST_TIMEOUT_S?" in line for line in seen), seen
