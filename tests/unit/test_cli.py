"""The command line fails clearly, without a traceback, when it cannot start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_missing_model_says_what_to_do(tmp_path: Path) -> None:
    result = run_cli("serve", "--model-path", str(tmp_path / "absent"))
    assert result.returncode == 2
    assert "make model" in result.stderr and "SENTIMENT_MODEL_PATH" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_setting_names_the_variable(tiny_model_dir: Path) -> None:
    env = {"SENTIMENT_PORT": "eighty", "PATH": "/usr/bin:/bin"}
    env["SENTIMENT_REQUEST_TIMEOUT"] = "5"  # a typo: warned about, not fatal
    result = run_cli("serve", "--model-path", str(tiny_model_dir), env=env)
    assert result.returncode == 2
    assert "SENTIMENT_PORT='eighty': Input should be a valid integer" in result.stderr
    assert "did you mean SENTIMENT_REQUEST_TIMEOUT_S?" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_bad_flag_is_named_as_the_flag(tiny_model_dir: Path) -> None:
    result = run_cli("serve", "--model-path", str(tiny_model_dir), "--port", "0")
    assert result.returncode == 2
    assert "--port=0: Input should be greater than or equal to 1" in result.stderr


def test_serve_picks_the_colocated_layout_only_on_a_small_cpu_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from service.local import local_layout
    from service.settings import Settings

    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert local_layout(Settings()) == "colocated"
    assert local_layout(Settings(num_gpus=1)) == "two-tier"
    assert local_layout(Settings(ingress_replicas=2)) == "two-tier"
    assert local_layout(Settings(num_replicas=2)) == "two-tier"
    assert local_layout(Settings(layout="two-tier")) == "two-tier"  # set: kept
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert local_layout(Settings()) == "two-tier"
    monkeypatch.setenv("SENTIMENT_LAYOUT", "colocated")
    assert local_layout(Settings()) == "colocated"


def test_colocated_runs_as_many_replicas_as_asked(tiny_model_dir: Path) -> None:
    from service.deployment import app_for
    from service.settings import Settings

    settings = Settings(model_path=tiny_model_dir, layout="colocated", num_replicas=2)
    deployment = app_for(settings)._bound_deployment
    assert deployment.name == "SentimentIngress" and deployment.num_replicas == 2


def test_colocated_refuses_an_ingress_replica_count(tiny_model_dir: Path) -> None:
    # Each co-located replica is an ingress: a count for the ingress tier alone has no meaning
    # there, and used to be dropped without a word.
    env = {"SENTIMENT_LAYOUT": "colocated", "SENTIMENT_INGRESS_REPLICAS": "2", "PATH": "/usr/bin"}
    result = run_cli("serve", "--model-path", str(tiny_model_dir), env=env)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "ingress_replicas (2) must be 1 in the colocated layout" in result.stderr


def test_local_model_replicas_share_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    from service.local import local_threads
    from service.settings import Settings

    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert local_threads(Settings()) == 8  # one replica: every core
    assert local_threads(Settings(num_replicas=2)) == 4  # not 2 x 8 threads on 8 cores
    assert local_threads(Settings(num_replicas=16)) == 1
    assert local_threads(Settings(num_replicas=2, torch_threads=3)) == 3  # set: kept
    assert local_threads(Settings(num_gpus=1)) is None  # a GPU replica picks its own
