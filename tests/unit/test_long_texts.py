"""Long texts through both tiers on one event loop, without a Ray cluster: the ingress's window
encoder and coalescer in front of the real model replica class (its batcher, planner and
forwards), running the tiny BERT loaded from disk."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from service.chunking import WindowEncoder
from service.coalescer import Coalescer, Reply
from service.model import SentimentModel
from service.modelcore import ModelCore
from tests.tiny_bert import SAMPLE_TEXT
from tests.windows import (
    build_sharp_bert,
    contrasting_text,
    reference_windows,
    weighted_mean,
)

MAX_LEN, OVERLAP = 32, 4


class Forwards:
    """The replica's own forward, noting the rows of every forward it runs."""

    def __init__(self, forward: Any) -> None:
        self.forward = forward
        self.rows: list[list[tuple[int, ...]]] = []

    def __call__(self, rows: list[npt.NDArray[np.int32]]) -> Any:
        self.rows.append([tuple(row.tolist()) for row in rows])
        return self.forward(rows)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_sharp_bert(tmp_path_factory.mktemp("models") / "sharp")


@pytest.fixture
def replica(model_dir: Path) -> Iterator[Any]:
    """The model tier; an idle model waits 0.2 s for company, so concurrent calls meet."""
    settings = {
        "model_path": str(model_dir),
        "max_seq_len": MAX_LEN,
        "warmup": False,
        "batch": {
            "batch_wait_timeout_s": 0.2,
            "max_batch_tokens": 1024,
            "micro_batch_tokens": 256,
            "max_pending_texts": 64,
        },
    }
    tier = ModelCore(settings)
    tier.forwards.alone = Forwards(tier.forwards.alone)
    yield tier
    tier._stop.set()
    tier.forwards.executor.shutdown()


@pytest.fixture(scope="module")
def local(model_dir: Path) -> SentimentModel:
    return SentimentModel.load(model_dir, device="cpu", max_length=MAX_LEN)


def classify(
    replica: Any, encoder: WindowEncoder, requests: list[list[str]], in_flight: int = 8
) -> list[Reply]:
    """Each request tokenized as the ingress does, all sent at once through a coalescer."""

    async def main() -> list[Reply]:
        coalescer = Coalescer(replica.infer, max_texts=256, in_flight=in_flight)
        deadline = time.monotonic() + 30
        futures = [coalescer.submit(encoder.encode(texts), deadline) for texts in requests]
        return list(await asyncio.gather(*futures))

    return asyncio.run(main())


def windows_of(model_dir: Path, text: str, max_windows: int = 8) -> list[list[int]]:
    return reference_windows(model_dir, text, MAX_LEN, OVERLAP, max_windows)


def test_a_long_texts_answer_is_the_length_weighted_mean_of_its_windows(
    replica: Any, local: SentimentModel, model_dir: Path
) -> None:
    encoder = WindowEncoder.load(model_dir, MAX_LEN, max_windows=8, overlap=OVERLAP)
    long = contrasting_text(local, model_dir, SAMPLE_TEXT, MAX_LEN, OVERLAP)
    short = SAMPLE_TEXT[6]
    [reply] = classify(replica, encoder, [[long, short]])
    assert reply.windows == [3, 1] and reply.truncated == [False, False]
    windows = windows_of(model_dir, long)
    assert len({len(w) for w in windows}) > 1  # unequal: the weights matter
    assert reply.probs[0].tolist() == pytest.approx(weighted_mean(local, windows), abs=1e-5)
    assert reply.probs[1].tolist() == pytest.approx(list(local.classify([short])[0].values()))
    # The plain mean of the windows is another answer, told apart by far more than the
    # tolerance above.
    each = np.stack([local.predict([w])[0].numpy() for w in windows])
    assert abs(reply.probs[0][0] - each[:, 0].mean()) > 1e-3, each[:, 0]


def test_windows_of_several_requests_share_forwards(
    replica: Any, local: SentimentModel, model_dir: Path
) -> None:
    encoder = WindowEncoder.load(model_dir, MAX_LEN, max_windows=8, overlap=OVERLAP)
    texts = [", ".join(SAMPLE_TEXT[i : i + 6]) for i in range(3)]  # 3 windows each
    replies = classify(replica, encoder, [[text] for text in texts])  # one call each
    assert [r.windows for r in replies] == [[3], [3], [3]]
    owner = {tuple(w): i for i, text in enumerate(texts) for w in windows_of(model_dir, text)}
    assert len(owner) == 9
    forwards = [{owner[row] for row in rows} for rows in replica.forwards.alone.rows]
    assert sum(len(rows) for rows in replica.forwards.alone.rows) == 9  # every window ran once
    assert len(forwards) < 3 and any(len(requests) > 1 for requests in forwards), forwards
    for reply, text in zip(replies, texts, strict=True):
        expected = weighted_mean(local, windows_of(model_dir, text))
        assert reply.probs[0].tolist() == pytest.approx(expected, abs=1e-5)


def test_a_text_past_the_window_limit_keeps_its_start_and_end_and_is_flagged(
    replica: Any, local: SentimentModel, model_dir: Path
) -> None:
    encoder = WindowEncoder.load(model_dir, MAX_LEN, max_windows=3, overlap=OVERLAP)
    longest = ", ".join(SAMPLE_TEXT * 2)  # 8 windows' worth
    [reply] = classify(replica, encoder, [[longest, "ok"]])
    assert reply.windows == [3, 1] and reply.truncated == [True, False]
    kept = windows_of(model_dir, longest, max_windows=3)
    assert reply.probs[0].tolist() == pytest.approx(weighted_mean(local, kept), abs=1e-5)
    forwarded = {row for rows in replica.forwards.alone.rows for row in rows}
    assert tuple(kept[-1]) in forwarded  # the window holding the text's end ran


def test_truncate_mode_answers_as_before(
    replica: Any, local: SentimentModel, model_dir: Path
) -> None:
    encoder = WindowEncoder.load(model_dir, MAX_LEN, max_windows=1)
    texts = [", ".join(SAMPLE_TEXT[:6]), "great phone"]
    [reply] = classify(replica, encoder, [texts])
    assert reply.windows == [1, 1] and reply.truncated == [True, False]
    for got, expected in zip(reply.probs.tolist(), local.classify(texts), strict=True):
        assert got == pytest.approx(list(expected.values()), abs=1e-5)
