"""Long texts on real Ray Serve (the shared application, max_seq_len 32, 8 windows at most):
answers are the length-weighted mean of their windows, run in-process; a text past the
window limit is flagged; a histogram counts the windows of every text."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.model import SentimentModel
from tests.integration.conftest import Cluster, Deployed
from tests.integration.load import burst
from tests.tiny_bert import SAMPLE_TEXT
from tests.windows import reference_windows, weighted_mean

pytestmark = pytest.mark.integration
WINDOWS = "ray_sentiment_long_text_windows"


def test_long_texts_are_read_in_windows(
    cluster: Cluster, main_app: Deployed, tiny_model_dir: Path
) -> None:
    def windows(le: str) -> float:
        """Long texts answered by the shared application with at most `le` windows."""
        return cluster.metric(f"{WINDOWS}_bucket", application="main", le=le)

    before = {le: windows(le) for le in ("6.0", "8.0")}
    texts = [", ".join(SAMPLE_TEXT[i : i + 6]) for i in range(3)]  # 3 windows each
    chinese = "屏幕很亮" * 100  # 400 characters, one token each: 16 windows' worth
    responses = burst(main_app, [{"texts": [text, "ok"]} for text in texts])
    responses.append(main_app.classify({"texts": [texts[0], chinese]}))
    assert [r.status_code for r in responses] == [200] * 4, responses[-1].text

    local = SentimentModel.load(tiny_model_dir, device="cpu", max_length=32)
    for response, text in zip(responses[:3], texts, strict=True):
        long, short = response.json()["results"]
        assert (long["windows"], long["truncated"], short["windows"]) == (3, False, 1)
        expected = weighted_mean(local, reference_windows(tiny_model_dir, text, 32, 4, 8))
        assert list(long["probabilities"].values()) == pytest.approx(expected, abs=1e-5)
    long, cut = responses[-1].json()["results"]
    assert (long["windows"], cut["windows"], cut["truncated"]) == (3, 8, True)
    expected = weighted_mean(local, reference_windows(tiny_model_dir, chinese, 32, 4, 8))
    assert list(cut["probabilities"].values()) == pytest.approx(expected, abs=1e-5)

    # Other tests share the application, so only growth is certain: 5 long texts more (the
    # 3 short ones are not observed), and one of them (the Chinese text) with 7 or 8 windows.
    cluster.wait_for(lambda: windows("8.0") >= before["8.0"] + 5)
    assert windows("8.0") - windows("6.0") >= before["8.0"] - before["6.0"] + 1
