"""Corpus shards and text tokenizers for `fastmmeval contam`: LLaVA JSON, JSONL, parquet and token shards."""

from __future__ import annotations

import collections
import io
import json
import pickle
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xxhash
from PIL import Image

from fastmmeval.contam.ngram.hashing import IMAGE_SEED, TEXT_SEED, ngram_hashes_reference
from fastmmeval.contam.ngram.reference import reference_counts
from fastmmeval.contam.ngram.settings import CorpusError, IndexSettings
from fastmmeval.contam.ngram.stream import stream_counts
from fastmmeval.contam.ngram.token_shards import TokenShardSource, write_token_shard
from fastmmeval.contam.readers import records
from fastmmeval.contam.readers.image_tokens import ImageTokenizerBase, OfflineImageTokenizer
from fastmmeval.contam.readers.records import iter_json_array
from fastmmeval.contam.readers.shards import (
    RecordSource,
    expand_paths,
    guess_format,
    open_sources,
    without_images,
)
from fastmmeval.contam.readers.text_tokens import (
    HFTextTokenizer,
    WordTokenizer,
    make_text_tokenizer,
    reference_word_ids,
)


class FixedImageTokenizer(ImageTokenizerBase):
    """Stands in for an image tokenizer: 32 tokens from the image's mean colour."""

    name = "fixed"
    fingerprint = "fixed-v0"

    def prepare(self, image: Image.Image) -> np.ndarray:
        return np.asarray(image)

    def encode_prepared(self, prepared: list[np.ndarray]) -> np.ndarray:
        means = [int(pixels.mean()) for pixels in prepared]
        return np.array([[m + k for k in range(32)] for m in means], dtype=np.uint32)


def _llava(path: Path, records: list[dict]) -> Path:
    path.write_text(json.dumps(records, indent=2), encoding="utf-8")
    return path


RECORDS = [
    {
        "id": "000001",
        "image": "coco/1.png",
        "conversations": [
            {"from": "human", "value": "<image>\nWhat is on the table?"},
            {"from": "gpt", "value": "A cup of coffee and a spoon."},
            {"from": "human", "value": "What colour is the cup?"},
            {"from": "gpt", "value": "White."},
        ],
    },
    {"id": "000002", "conversations": [{"from": "human", "value": "Tell me a joke."}, {"from": "gpt", "value": ""}]},
    {"id": "000003", "image": "coco/missing.png", "conversations": [{"from": "human", "value": "<image> Hi"}]},
]


def test_words_tokenizer_is_lowercase_punctuation_free_and_stable() -> None:
    tok = WordTokenizer()
    [ids] = tok.encode(["Hello, World! hello_world (Émile's) 42"])
    words = ["hello", "world", "hello", "world", "émile", "s", "42"]
    expected = [xxhash.xxh32_intdigest(w.encode(), seed=0x5EED_0001) for w in words]
    assert ids.dtype == np.uint32 and ids.tolist() == expected
    text = "What is THIS?  A cat."
    ids, spans = tok.encode_spans(text)
    assert [text[s:e] for s, e in spans] == ["What", "is", "THIS", "A", "cat"]
    assert ids.tolist() == tok.encode([text])[0].tolist()
    assert pickle.loads(pickle.dumps(tok)).encode(["a b"])[0].tolist() == tok.encode(["A, B"])[0].tolist()
    assert tok.fingerprint == "words-v1" == make_text_tokenizer("words").fingerprint


def _same_words(texts: list[str]) -> None:
    got = WordTokenizer().encode(texts)
    want = reference_word_ids(texts)
    assert len(got) == len(want)
    for text, g, w in zip(texts, got, want, strict=True):
        assert g.dtype == np.uint32 and g.tolist() == w.tolist(), repr(text)


def test_native_word_split_equals_the_python_rule_on_every_code_point() -> None:
    # Each code point alone, between ASCII letters, and in runs of 48 neighbours (surrogates included): the
    # native split reads a table of word characters and lower cases taken from this Python.
    every = [chr(c) for c in range(0x110000)]
    _same_words(["".join(every[i : i + 48]) for i in range(0, len(every), 48)])
    _same_words([f"Ab{c}Cd {c}x_{c}" for c in every[::7]])


def test_native_sigma_follows_pythons_final_sigma_rule_next_to_every_word_character() -> None:
    # A capital sigma lowers to a final sigma after a cased character and not before one, skipping
    # case-ignorable ones in between (modifier letters such as U+02B0 are word characters and case-ignorable).
    cjk = (0x3400, 0xA000), (0x20000, 0x40000)  # tens of thousands of uncased ideographs: left out for time
    chars = [chr(c) for c in range(0x110000) if chr(c).isalnum() and not any(lo <= c < hi for lo, hi in cjk)]
    _same_words([t for c in chars for t in (f"A{c}Σ", f"AΣ{c}", f"{c}Σ", f"Σ{c}Σ", f"ΑΣ{c}{c}Β")])


def test_native_word_split_equals_the_python_rule_on_mixed_text() -> None:
    rng = np.random.default_rng(0)
    pieces = list("aZ09 _-.,!\t\n") + ["é", "Σ", "ΣΑΣ", "ς", "İ", "ß", "ǅ", "\u0301", "中文", "٣", "Ⅻ", "😀"]
    pieces += ["\ud800", "\x00"]
    texts = ["".join(rng.choice(pieces, size=int(rng.integers(0, 40)))) for _ in range(3000)]
    _same_words(texts + ["", "   ", "___", "A" * 10_000, "Word" * 5000 + "é"])
    tok = WordTokenizer()
    ids, offsets = tok.encode_concat(texts)
    lengths = [len(w) for w in tok.encode(texts)]
    assert offsets.dtype == np.int64 and offsets.tolist() == np.cumsum([0, *lengths])[:-1].tolist()
    assert np.concatenate(tok.encode(texts)).tolist() == ids.tolist()
    for text in texts[:300]:  # the benchmark side (ids with character spans) agrees with the corpus side
        spans_ids, spans = tok.encode_spans(text)
        assert spans_ids.tolist() == tok.encode([text])[0].tolist() and len(spans) == len(spans_ids)
    assert tok.encode([]) == [] and tok.encode_concat([])[0].size == 0
    with pytest.raises(TypeError, match="not str"):
        tok.encode("a plain string")
    with pytest.raises(TypeError, match="expected str items"):
        tok.encode(["ok", b"bytes"])


def test_hugging_face_tokenizer_from_a_folder(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(special_tokens=["[UNK]"])
    raw.train_from_iterator(["what is on the table", "a cup of coffee"], trainer)
    PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]").save_pretrained(tmp_path / "tok")

    tok = make_text_tokenizer(str(tmp_path / "tok"))
    assert isinstance(tok, HFTextTokenizer)
    text = "what is on the table"
    ids, spans = tok.encode_spans(text)
    assert [text[s:e] for s, e in spans] == text.split()
    assert ids.tolist() == tok.encode([text])[0].tolist() and ids.dtype == np.uint32
    assert tok.fingerprint.startswith("hf:") and tok.fingerprint != WordTokenizer().fingerprint
    again = pickle.loads(pickle.dumps(tok))  # the loaded tokenizer is not pickled, only its name
    assert again.fingerprint == tok.fingerprint
    with pytest.raises(Exception, match="cannot load a Hugging Face tokenizer"):
        _ = make_text_tokenizer(str(tmp_path / "nope")).tokenizer


def test_json_array_is_parsed_incrementally(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _llava(tmp_path / "train.json", RECORDS * 5)
    monkeypatch.setattr(records, "_JSON_CHUNK", 7)  # records straddle many chunk boundaries
    assert list(iter_json_array(path)) == RECORDS * 5
    (tmp_path / "bad.json").write_text(json.dumps(RECORDS)[:-40])
    with pytest.raises(CorpusError, match=r"bad\.json: record 2: invalid JSON"):
        list(iter_json_array(tmp_path / "bad.json"))
    (tmp_path / "obj.json").write_text('{"id": 1}')
    with pytest.raises(CorpusError, match="expected a JSON array"):
        list(iter_json_array(tmp_path / "obj.json"))


def test_llava_turns_are_documents_and_missing_images_are_counted(tmp_path: Path) -> None:
    (tmp_path / "img" / "coco").mkdir(parents=True)
    Image.new("RGB", (16, 16), (200, 10, 10)).save(tmp_path / "img" / "coco" / "1.png")
    shard = _llava(tmp_path / "train.json", RECORDS)
    [source] = open_sources([str(shard)], "auto", WordTokenizer(), FixedImageTokenizer(), tmp_path / "img")
    blocks = list(source.blocks())
    text = next(b for b in blocks if b.seed == TEXT_SEED)
    image = next(b for b in blocks if b.seed == IMAGE_SEED)
    # Every turn (human and gpt) is one document; `<image>` is not a word of the text.
    assert list(text.ids) == ["000001"] * 4 + ["000002"] * 2 + ["000003"]
    assert text.doc_offsets.tolist() == [0, 5, 12, 17, 18, 22, 22]
    assert text.tokens[:5].tolist() == WordTokenizer().encode(["What is on the table?"])[0].tolist()
    assert list(image.ids) == ["000001"]
    assert image.tokens.tolist() == [int(np.mean([200, 10, 10])) + k for k in range(32)]
    assert source.missing_images() == 1
    assert pickle.loads(pickle.dumps(source)).name == str(shard)
    nowhere = RecordSource(shard, "llava", WordTokenizer(), FixedImageTokenizer(), tmp_path / "elsewhere")
    assert {b.seed for b in nowhere.blocks()} == {TEXT_SEED} and nowhere.missing_images() == 2

    with pytest.raises(CorpusError, match=r"train2\.json: record 0: field 'conversations'"):
        list(RecordSource(_llava(tmp_path / "train2.json", [{"id": 1}]), "llava", WordTokenizer()).blocks())


def test_reader_prepares_images_on_its_threads_as_encode_would(tmp_path: Path) -> None:
    # The reader decodes and thumbnails on its threads, then runs only the batched step; the tokens are those
    # of `encode` on the decoded images, whatever the files' modes (RGB, grey, palette with transparency).
    rng = np.random.default_rng(5)
    (tmp_path / "img").mkdir()
    made = []
    for r, mode in enumerate(["RGB", "L", "RGBA", "P", "RGB"] * 3):
        image = Image.fromarray(rng.integers(0, 256, (40 + r, 50, 3), dtype=np.uint8)).convert(mode)
        image.save(tmp_path / "img" / f"{r}.png")
        made.append({"id": str(r), "image": f"{r}.png", "conversations": [{"from": "human", "value": "?"}]})
    tok = OfflineImageTokenizer()
    source = RecordSource(
        _llava(tmp_path / "train.json", made), "llava", WordTokenizer(), tok, tmp_path / "img", image_batch=4,
        decode_threads=3,
    )
    got = np.concatenate([b.tokens for b in source.blocks() if b.seed == IMAGE_SEED]).reshape(-1, 32)
    decoded = [Image.open(tmp_path / "img" / f"{r}.png").convert("RGB") for r in range(len(made))]
    assert np.array_equal(got, tok.encode(decoded))
    with pytest.raises(CorpusError, match=r"train\.json: --image_batch must be at least 1"):
        RecordSource(tmp_path / "train.json", "llava", WordTokenizer(), tok, image_batch=0)


class SlowBatchTokenizer(FixedImageTokenizer):
    """A batched step that takes wall time without holding the GIL (as a GPU model does); logs when things ran."""

    def __init__(self) -> None:
        self.log: list[tuple[str, float, float]] = []

    def prepare(self, image: Image.Image) -> np.ndarray:
        start = time.perf_counter()
        pixels = super().prepare(image)
        self.log.append(("prepare", start, time.perf_counter()))
        return pixels

    def encode_prepared(self, prepared: list[np.ndarray]) -> np.ndarray:
        start = time.perf_counter()
        time.sleep(0.05)
        self.log.append(("encode", start, time.perf_counter()))
        return super().encode_prepared(prepared)


def test_next_image_batch_is_decoded_while_this_one_is_tokenized(tmp_path: Path) -> None:
    (tmp_path / "img").mkdir()
    records = []
    for r in range(12):
        Image.new("RGB", (8, 8), (r, r, r)).save(tmp_path / "img" / f"{r}.png")
        records.append({"id": str(r), "image": f"{r}.png", "conversations": [{"from": "human", "value": "?"}]})
    tok = SlowBatchTokenizer()
    source = RecordSource(
        _llava(tmp_path / "train.json", records), "llava", WordTokenizer(), tok, tmp_path / "img", image_batch=4
    )
    images = [b for b in source.blocks() if b.seed == IMAGE_SEED]
    assert [list(b.ids) for b in images] == [[str(r) for r in range(k, k + 4)] for k in (0, 4, 8)]
    encodes = [(start, end) for kind, start, end in tok.log if kind == "encode"]
    prepares = sorted(start for kind, start, _ in tok.log if kind == "prepare")
    # Batch k + 1's images were being decoded and prepared before batch k's batched step ended.
    assert len(encodes) == 3 and all(prepares[4 * (k + 1)] < encodes[k][1] for k in range(2))


def test_small_blocks_come_out_in_corpus_order(tmp_path: Path) -> None:
    # Text blocks are tokenized on a thread while the next records are read: many small text and image
    # blocks must still come out in corpus order, each holding the next documents.
    (tmp_path / "img").mkdir()
    records = []
    for r in range(40):
        Image.new("RGB", (8, 8), (r, 2 * r, 3 * r)).save(tmp_path / "img" / f"{r}.png")
        turns = [{"from": "human", "value": f"Question {r} about picture {r}?"}]
        turns.append({"from": "gpt", "value": f"Answer {r}."})
        records.append({"id": str(r), "image": f"{r}.png", "conversations": turns})
    source = RecordSource(
        _llava(tmp_path / "train.json", records), "llava", WordTokenizer(), FixedImageTokenizer(), tmp_path / "img",
        block_tokens=6, image_batch=3,
    )
    blocks = list(source.blocks())
    texts = [b for b in blocks if b.seed == TEXT_SEED]
    assert len(texts) > 5 and len(blocks) - len(texts) > 5
    # As read: a block ends at a record, and a record's text block comes before its image block.
    ends = [(int(b.ids[-1]), b.seed == IMAGE_SEED) for b in blocks]
    assert ends == sorted(ends)
    assert [i for b in texts for i in b.ids] == [str(r) for r in range(40) for _ in range(2)]
    every = [t["value"] for rec in records for t in rec["conversations"]]
    assert np.concatenate([b.tokens for b in texts]).tolist() == np.concatenate(WordTokenizer().encode(every)).tolist()
    assert [i for b in blocks if b.seed == IMAGE_SEED for i in b.ids] == [str(r) for r in range(40)]


def test_jsonl_and_parquet_columns_and_embedded_images(tmp_path: Path) -> None:
    png = io.BytesIO()
    Image.new("RGB", (8, 8), (0, 0, 255)).save(png, format="PNG")
    rows = [
        {"uid": "a", "question": "Is it blue?", "img": {"bytes": png.getvalue()},
         "answers": [{"from": "gpt", "value": "Yes."}, {"from": "gpt", "value": "It is."}]},
        {"uid": "b", "question": "Nothing here", "answers": [{"from": "gpt", "value": "A turn."}],
         "img": {"bytes": b"broken", "path": "x.png"}},
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    jsonl = [{**r, "img": "blue.png" if r["uid"] == "a" else "gone.png"} for r in rows]
    Image.new("RGB", (8, 8), (0, 0, 255)).save(tmp_path / "blue.png")
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in jsonl))
    for shard in ("train.parquet", "train.jsonl"):
        [source] = open_sources(
            [str(tmp_path / shard)], "auto", WordTokenizer(), FixedImageTokenizer(), None,
            ("question", "answers"), "img", "uid",
        )  # fmt: skip
        blocks = list(source.blocks())
        assert list(blocks[0].ids) == ["a", "a", "a", "b", "b"], shard
        assert list(blocks[1].ids) == ["a"] and source.missing_images() == 1, shard
    with pytest.raises(CorpusError, match=r"no column\(s\) \['text', 'image', 'id'\]"):
        list(open_sources([str(tmp_path / "train.parquet")], text_tokenizer=WordTokenizer())[0].blocks())


def test_images_of_finds_the_records_of_training_ids(tmp_path: Path) -> None:
    # For a report's thumbnails: the images of a few training ids, from JSON and from parquet row groups.
    rows = []
    for r in range(12):
        png = io.BytesIO()
        Image.new("RGB", (8, 8), (20 * r, 0, 0)).save(png, format="PNG")
        rows.append({"id": f"r{r}", "text": "hello", "image": {"bytes": png.getvalue(), "path": None}})
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet", row_group_size=4)
    source = RecordSource(tmp_path / "train.parquet", "parquet", WordTokenizer())
    found = source.images_of({"r1", "r10", "nobody"})
    assert sorted(found) == ["r1", "r10"]
    assert [found[i][0].getpixel((0, 0)) for i in ("r1", "r10")] == [(20, 0, 0), (200, 0, 0)]
    (tmp_path / "img" / "coco").mkdir(parents=True)
    Image.new("RGB", (16, 16), (200, 10, 10)).save(tmp_path / "img" / "coco" / "1.png")
    shard = _llava(tmp_path / "train.json", RECORDS)
    llava = RecordSource(shard, "llava", WordTokenizer(), image_root=tmp_path / "img")
    found = llava.images_of({"000001", "000003"})
    assert [im.size for im in found["000001"]] == [(16, 16)] and found["000003"] == []  # its image is missing


def _random_docs(rng: np.random.Generator, count: int) -> list[np.ndarray]:
    lengths = rng.choice([0, 1, 7, 8, 9, 30, 200], size=count)
    return [rng.integers(0, 50, size=n).astype(np.uint32) for n in lengths]


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32])
def test_token_shards_stream_whole_documents_in_bounded_blocks(tmp_path: Path, dtype: type) -> None:
    rng = np.random.default_rng(3)
    docs = _random_docs(rng, 120)
    path = tmp_path / f"shard{np.dtype(dtype).itemsize * 8}.u{np.dtype(dtype).itemsize * 8}"
    write_token_shard(path, docs, dtype)
    source = TokenShardSource(path, block_tokens=64)
    blocks = list(source.blocks())
    assert all(b.tokens.dtype == dtype for b in blocks)
    assert all(len(b.tokens) <= 64 or len(b.doc_offsets) == 1 for b in blocks)  # a long doc is a block alone
    ends = [[*b.doc_offsets[1:], len(b.tokens)] for b in blocks]
    got = [b.tokens[o:e] for b, end in zip(blocks, ends, strict=True) for o, e in zip(b.doc_offsets, end, strict=True)]
    assert [d.tolist() for d in got] == [d.tolist() for d in docs]
    assert [i for b in blocks for i in b.ids] == [f"{path.name}#{k}" for k in range(len(docs))]
    # Counting n-grams block by block equals counting them document by document.
    expected = collections.Counter(h for d in docs for h in ngram_hashes_reference(d, [0], 8, TEXT_SEED).tolist())
    assert reference_counts([source], IndexSettings()) == expected
    # The native path takes the blocks as read from disk (little-endian dtypes included).
    queries = np.array(sorted(expected), dtype=np.uint64)
    counts, _ = stream_counts(queries, [source], IndexSettings())
    assert counts.tolist() == [min(expected[q], 11) for q in queries.tolist()]
    image_source = TokenShardSource(path, modality="image")
    assert {b.seed for b in image_source.blocks()} == {IMAGE_SEED}
    assert without_images(image_source) is None and without_images(source) is source


def test_token_shard_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "s.u32"
    write_token_shard(path, [np.arange(10), np.arange(5)])
    path.with_name("s.u32.offsets").write_bytes(np.array([0, 20], "<i8").tobytes())
    with pytest.raises(CorpusError, match=r"s\.u32\.offsets: offsets must start at 0 and stay within 15 tokens"):
        list(TokenShardSource(path).blocks())
    path.with_name("s.u32.offsets").unlink()
    with pytest.raises(CorpusError, match=r"s\.u32\.offsets: missing"):
        list(TokenShardSource(path).blocks())
    with pytest.raises(CorpusError, match=r"above 65535"):
        write_token_shard(tmp_path / "t.u16", [np.array([70000])], np.uint16)
    with pytest.raises(CorpusError, match="ends in .u16 or .u32"):
        TokenShardSource(tmp_path / "s.bin")


def test_shard_specs_expand_globs_and_guess_formats(tmp_path: Path) -> None:
    for name in ("b.json", "a.json", "c.jsonl"):
        (tmp_path / name).write_text("[]")
    found = expand_paths([str(tmp_path / "*.json"), str(tmp_path / "a.json")])
    assert found == [tmp_path / "a.json", tmp_path / "b.json"]
    with pytest.raises(CorpusError, match="no such file"):
        expand_paths([str(tmp_path / "*.parquet")])
    formats = [guess_format(Path(p)) for p in ("x.json", "x.jsonl", "x.parquet", "x.u16")]
    assert formats == ["llava", "jsonl", "parquet", "tokens"]
    with pytest.raises(CorpusError, match="--format"):
        guess_format(Path("x.txt"))
