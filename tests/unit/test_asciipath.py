"""The ASCII path gives exactly the ids of the tokenizer's full pipeline, on every ASCII
character, and steps aside for other texts, added tokens and other pipelines."""

from __future__ import annotations

import random
import string

import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

from service import asciipath
from service.asciipath import AsciiPath
from service.chunking import WindowEncoder
from service.encoding import special_frame
from tests.tiny_bert import SAMPLE_TEXT, SPECIALS

EVERY_ASCII = "".join(map(chr, range(128)))


def _random_texts(count: int, seed: int) -> list[str]:
    """Reviews of words and punctuation, with every ASCII character (controls included)
    sprinkled in."""
    rng = random.Random(seed)
    words = " ".join(SAMPLE_TEXT).split()
    texts = []
    for _ in range(count):
        parts = [
            rng.choice(words).upper() if rng.random() < 0.2 else rng.choice(words)
            for _ in range(rng.randint(0, 30))
        ]
        for _ in range(rng.randint(0, 6)):
            spot = rng.randint(0, len(parts))
            parts.insert(spot, "".join(rng.choices(EVERY_ASCII, k=rng.randint(1, 3))))
        texts.append(rng.choice([" ", "", "\t", "\n"]).join(parts))
    return texts


def _bert_tokenizer(normalizer: normalizers.Normalizer) -> Tokenizer:
    """A WordPiece vocabulary over every printable ASCII character and the sample words, both
    cases, so a wrong case or a kept control character shows as another id, not [UNK]."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    corpus = [*SAMPLE_TEXT, *(t.upper() for t in SAMPLE_TEXT), " ".join(string.printable)]
    trainer = trainers.WordPieceTrainer(vocab_size=300, special_tokens=SPECIALS)
    tok.train_from_iterator(corpus * 4, trainer)
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
    )
    return tok


BERT_NORMALIZERS = {
    "uncased": normalizers.BertNormalizer(lowercase=True),
    "cased": normalizers.BertNormalizer(lowercase=False),
    "uncased, text not cleaned": normalizers.BertNormalizer(clean_text=False, lowercase=True),
}


@pytest.mark.parametrize("kind", BERT_NORMALIZERS)
def test_ascii_texts_get_the_full_pipelines_ids(kind: str) -> None:
    tok = _bert_tokenizer(BERT_NORMALIZERS[kind])
    path = AsciiPath.of(tok)
    assert path is not None
    alone = [f"{c}" for c in EVERY_ASCII] + [f"Ab{c}cD" for c in EVERY_ASCII]
    long_word = "great" * 30  # past WordPiece's 100 characters a word: [UNK]
    texts = [*alone, *_random_texts(400, seed=5), EVERY_ASCII * 3, f"a {long_word} b", ""]
    for _ in range(2):  # the words' pieces computed, then from the cache
        fast = [path.ids(text) for text in texts]
        assert None not in fast
        full = tok.encode_batch_fast(texts)
        mismatched = [t for t, f, e in zip(texts, fast, full, strict=True) if f != e.ids]
        assert not mismatched, mismatched[:5]
    # Every printable character has an id of its own: [UNK] hides no mistake.
    assert all(tok.token_to_id(path.normalize(c)) for c in string.printable.strip())


def test_texts_that_are_not_ascii_or_hold_an_added_token_take_the_full_path() -> None:
    tok = _bert_tokenizer(normalizers.BertNormalizer())
    path = AsciiPath.of(tok)
    assert path is not None
    assert path.ids("great phone") is not None
    for text in ["café au lait", "great [SEP] phone", "a [Mask] b", "[cls]"]:
        assert path.ids(text) is None, text
    encoder = WindowEncoder(tok, max_length=32)
    texts = ["great phone", "great [SEP] phone", "café au lait", "a [Mask] b"]
    rows = encoder.encode(texts).packed
    assert [rows.row(i).tolist() for i in range(len(texts))] == [
        e.ids for e in tok.encode_batch_fast(texts)
    ]


def test_the_word_cache_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(asciipath, "CACHED_WORDS", 8)
    tok = _bert_tokenizer(normalizers.BertNormalizer())
    path = AsciiPath.of(tok)
    assert path is not None
    texts = _random_texts(50, seed=3)
    assert [path.ids(t) for t in texts] == [e.ids for e in tok.encode_batch_fast(texts)]
    assert 0 < len(path.words) <= 8


def test_a_text_of_no_words_gets_the_frame_alone() -> None:
    tok = _bert_tokenizer(normalizers.BertNormalizer())
    path = AsciiPath.of(tok)
    assert path is not None
    assert (
        path.ids(" \t\n")
        == tok.encode(" \t\n").ids
        == [tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")]
    )


@pytest.mark.parametrize(
    ("template", "head", "tail"),
    [
        ("[CLS] $A [SEP]", ["[CLS]"], ["[SEP]"]),
        ("$A [SEP]", [], ["[SEP]"]),
        ("[CLS] [CLS] $A", ["[CLS]", "[CLS]"], []),
        (None, [], []),
    ],
)
def test_the_special_frame_is_where_the_post_processor_puts_it(
    template: str | None, head: list[str], tail: list[str]
) -> None:
    tok = _bert_tokenizer(normalizers.BertNormalizer())
    ids = {name: tok.token_to_id(name) for name in ("[CLS]", "[SEP]")}
    tok.post_processor = (
        processors.TemplateProcessing(single=template, special_tokens=list(ids.items()))
        if template
        else None
    )
    assert special_frame(tok) == ([ids[n] for n in head], [ids[n] for n in tail])
    path = AsciiPath.of(tok)
    assert path is not None
    assert [path.ids(t) for t in SAMPLE_TEXT] == [tok.encode(t).ids for t in SAMPLE_TEXT]


@pytest.mark.parametrize(
    "normalizer",
    [None, normalizers.Lowercase(), normalizers.Sequence([normalizers.NFKC()])],
    ids=["none", "lowercase", "nfkc"],
)
def test_other_normalizers_get_no_ascii_path(normalizer: normalizers.Normalizer | None) -> None:
    tok = _bert_tokenizer(normalizers.BertNormalizer())
    tok.normalizer = normalizer
    assert AsciiPath.of(tok) is None


def test_other_pre_tokenizers_get_no_ascii_path() -> None:
    tok = _bert_tokenizer(normalizers.BertNormalizer())
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    assert AsciiPath.of(tok) is None


def test_window_encoder_windows_ascii_texts_as_before() -> None:
    """Long and short, ASCII or not, mixed in one call or alone: the same windows."""
    tok = _bert_tokenizer(normalizers.BertNormalizer(lowercase=True))
    encoder = WindowEncoder(tok, max_length=16, max_windows=3, overlap=2)
    assert encoder.ascii is not None
    texts = [*_random_texts(60, seed=9), "Café, GREAT phone " * 6]
    plain = WindowEncoder(Tokenizer.from_str(tok.to_str()), 16, 3, 2)
    plain.ascii = None
    for call in ([t] for t in texts), [texts]:
        for batch in call:
            got, want = encoder.encode(batch), plain.encode(batch)
            assert got.packed.ids.tolist() == want.packed.ids.tolist()
            assert got.packed.offsets.tolist() == want.packed.offsets.tolist()
            assert got.windows.tolist() == want.windows.tolist()
            assert got.truncated == want.truncated
