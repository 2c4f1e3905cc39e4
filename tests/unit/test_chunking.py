"""Long texts as windows: where windows fall, their ids against the HF tokenizer, truncate
mode, the weighted mean, and admission counting windows."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, models
from transformers import AutoTokenizer

from service.admission import Admission
from service.chunking import OFFLOAD_CHARS, WindowEncoder, aggregate, window_spans
from service.encoding import TextEncoder, unknown_id
from service.errors import Overloaded, PayloadTooLarge
from tests.tiny_bert import SAMPLE_TEXT, build_tiny_bert
from tests.windows import reference_windows

LONG = ", ".join(SAMPLE_TEXT[:6])  # 68 tokens: 3 windows of 32
CHINESE_REVIEWS = ["屏幕很亮，电池很耐用。", "物流太慢了，包装也坏了。", "质量不错，价格便宜。"]
CHINESE = "".join(CHINESE_REVIEWS) * 3  # 99 characters, one token each


@pytest.fixture(scope="module")
def zh_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny BERT with Chinese characters in its vocabulary, so they are not [UNK]."""
    return build_tiny_bert(
        tmp_path_factory.mktemp("zh") / "tiny-zh", texts=SAMPLE_TEXT + CHINESE_REVIEWS
    )


@pytest.mark.parametrize(
    ("tokens", "max_windows", "spans", "cut"),
    [
        (8, 3, [(0, 8)], False),
        (10, 3, [(0, 8), (6, 10)], False),
        (20, 3, [(0, 8), (6, 14), (12, 20)], False),
        # One window too many: the head is kept and the last window holds the text's end.
        (21, 3, [(0, 8), (6, 14), (13, 21)], True),
        (50, 2, [(0, 8), (42, 50)], True),
        (21, 1, [(0, 8)], True),
    ],
)
def test_windows_step_by_width_minus_overlap(
    tokens: int, max_windows: int, spans: list[tuple[int, int]], cut: bool
) -> None:
    assert window_spans(tokens, 8, 2, max_windows) == (spans, cut)


def test_an_overlap_as_wide_as_a_window_is_refused(tiny_model_dir: Path) -> None:
    with pytest.raises(ValueError, match="overlap"):
        WindowEncoder.load(tiny_model_dir, 16, max_windows=4, overlap=14)


@pytest.mark.parametrize(("text", "windows"), [(LONG, 3), ("great phone", 1)])
def test_windows_are_the_tokenizers_ids_framed_by_its_special_tokens(
    tiny_model_dir: Path, text: str, windows: int
) -> None:
    encoder = WindowEncoder.load(tiny_model_dir, 32, max_windows=8, overlap=4)
    request = encoder.encode([text])
    rows = [request.packed.row(i).tolist() for i in range(request.rows)]
    assert rows == reference_windows(tiny_model_dir, text, 32, 4, 8)
    assert request.windows.tolist() == [windows] and request.truncated == [False]
    assert max(len(row) for row in rows) <= 32


def test_chinese_is_chunked_by_tokens(zh_model_dir: Path) -> None:
    encoder = WindowEncoder.load(zh_model_dir, 32, max_windows=8, overlap=4)
    request = encoder.encode([CHINESE, "质量不错"])
    rows = [request.packed.row(i).tolist() for i in range(request.rows)]
    assert rows[:-1] == reference_windows(zh_model_dir, CHINESE, 32, 4, 8)
    assert 1 not in request.packed.ids  # [UNK]: every character is in the vocabulary
    # 99 one-character tokens in windows of 30 stepping by 26: starts 0, 26, 52, 78.
    assert request.windows.tolist() == [4, 1]
    assert request.packed.lengths().tolist() == [32, 32, 32, 23, 6]


def test_each_text_says_what_share_of_it_the_vocabulary_lacks(
    tiny_model_dir: Path, zh_model_dir: Path
) -> None:
    texts = ["great phone", "质量不错", "great phone 质量不错", LONG + " 质量不错" * 40]
    for model_dir in (tiny_model_dir, zh_model_dir):
        hf = AutoTokenizer.from_pretrained(model_dir)
        pieces = [hf.tokenize(text) for text in texts]
        expected = [p.count(hf.unk_token) / len(p) for p in pieces]
        request = WindowEncoder.load(model_dir, 32, max_windows=8, overlap=4).encode(texts)
        assert request.unknown == pytest.approx(expected)
    assert expected == [0.0, 0.0, 0.0, 0.0]  # the vocabulary with Chinese reads every text
    # The English one lacks every Chinese character; a long text counts whole, not only its
    # first window (68 known tokens, 160 unknown).
    assert WindowEncoder.load(tiny_model_dir, 32, 8).encode(texts).unknown == pytest.approx(
        [0.0, 1.0, 4 / 6, 160 / 228]
    )


def test_a_text_the_tokenizer_drops_whole_reads_as_unknown(tiny_model_dir: Path) -> None:
    # Visible enough to pass validation, but BERT's normalizer removes every character.
    texts = ["\u0301\u0301", "\ufffd", "great phone"]
    request = WindowEncoder.load(tiny_model_dir, 32).encode(texts)
    assert request.packed.lengths().tolist() == [2, 2, 4]  # [CLS] [SEP] alone
    assert request.unknown == [1.0, 1.0, 0.0]


def test_the_unknown_token_of_each_kind_of_tokenizer() -> None:
    wordpiece = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    unigram = Tokenizer(models.Unigram([("<s>", 0.0), ("<unk>", 0.0), ("a", -1.0)], unk_id=1))
    assert (unknown_id(wordpiece), unknown_id(unigram)) == (0, 1)
    assert unknown_id(Tokenizer(models.BPE())) is None  # byte-level BPE reads every text


def test_truncate_mode_is_the_plain_truncation_of_before(tiny_model_dir: Path) -> None:
    texts = [LONG, "ok", CHINESE, "great phone " * 14]
    request = WindowEncoder.load(tiny_model_dir, 32, max_windows=1).encode(texts)
    packed, truncated = TextEncoder.load(tiny_model_dir, 32).encode(texts)
    assert request.packed.ids.tolist() == packed.ids.tolist()
    assert request.packed.offsets.tolist() == packed.offsets.tolist()
    assert request.truncated == truncated == [True, False, True, False]
    assert request.windows.tolist() == [1, 1, 1, 1]


def test_aggregate_weighs_each_window_by_its_length() -> None:
    probs = np.array([[0.2, 0.8], [0.6, 0.4], [1.0, 0.0], [0.3, 0.7]], dtype=np.float32)
    lengths = np.array([32, 32, 16, 5])
    texts = aggregate(probs, lengths, np.array([3, 1]))
    assert texts[0].tolist() == pytest.approx([(6.4 + 19.2 + 16) / 80, (25.6 + 12.8) / 80])
    assert texts[1].tolist() == pytest.approx([0.3, 0.7])


def test_admission_counts_windows(tiny_model_dir: Path) -> None:
    encoder = WindowEncoder.load(tiny_model_dir, 32, max_windows=8, overlap=4)
    admission = Admission(limit=8, retry_after_s=1)
    two_long = encoder.encode([LONG, LONG])  # 2 texts, 6 windows
    assert two_long.rows == 6
    with admission.hold(two_long.rows):
        assert admission.pending == 6
        admission.check(encoder.encode(["ok", "fine"]).rows)  # 2 more fit
        with pytest.raises(Overloaded) as overloaded:  # 3 texts would fit; 3 windows do not
            admission.check(encoder.encode([LONG]).rows)
        assert overloaded.value.status == 429 and overloaded.value.headers["Retry-After"] == "1"
    assert admission.pending == 0
    # More windows than the bound can never be admitted: no retry would help.
    with pytest.raises(PayloadTooLarge) as too_large:
        admission.check(encoder.encode([LONG, LONG, LONG]).rows)
    assert too_large.value.status == 413
    assert admission.pending == 0


def test_a_request_counts_as_its_texts_until_its_windows_are_known(tiny_model_dir: Path) -> None:
    encoder = WindowEncoder.load(tiny_model_dir, 32, max_windows=8, overlap=4)
    admission = Admission(limit=8, retry_after_s=1)
    texts = [LONG, LONG, LONG]
    with admission.hold(len(texts)) as held:
        assert admission.pending == 3  # in flight (a drain waits for it) while tokenized
        with pytest.raises(PayloadTooLarge):
            held.resize(encoder.encode(texts).rows)  # 9 windows
    assert admission.pending == 0
    with admission.hold(2) as held:
        held.resize(encoder.encode([LONG, LONG]).rows)
        assert admission.pending == 6
        with admission.hold(1) as other, pytest.raises(Overloaded):
            other.resize(encoder.encode([LONG]).rows)  # its 3 windows do not fit beside the 6
        assert admission.pending == 6
    assert admission.pending == 0


def test_a_long_request_is_tokenized_off_the_event_loop_to_the_same_windows(
    tiny_model_dir: Path,
) -> None:
    encoder = WindowEncoder.load(tiny_model_dir, 32, max_windows=8, overlap=4)
    short, long = [LONG, "ok"], [LONG * 40, CHINESE * 10]
    assert sum(map(len, short)) <= OFFLOAD_CHARS < sum(map(len, long))
    for texts in (short, long):
        got, expected = asyncio.run(encoder.encode_async(texts)), encoder.encode(texts)
        assert got.packed.ids.tolist() == expected.packed.ids.tolist()
        assert got.windows.tolist() == expected.windows.tolist()
        assert got.truncated == expected.truncated
