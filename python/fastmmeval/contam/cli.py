"""`fastmmeval contam index | add | compact | scan | stats`: contamination audits from the command line."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from fastmmeval.errors import ConfigError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(I?B)?\s*$", re.IGNORECASE)


def parse_memory(text: str) -> int:
    """'1GB', '512MB', '2GiB' or a plain number of bytes -> bytes (K/M/G/T are powers of 1024)."""
    m = _SIZE.match(text)
    if not m:
        raise ConfigError(f"--memory {text!r}: expected a size such as 512MB or 2GB")
    return int(float(m.group(1)) * 1024 ** "_KMGT".index((m.group(2) or "_").upper()))


def _add_tokenizer_flags(p: argparse.ArgumentParser, defaults: bool) -> None:
    p.add_argument(
        "--text_tokenizer",
        default="words" if defaults else None,
        help="`words` (lower-cased words, tokenizer-independent) or a Hugging Face tokenizer name or folder"
        + ("" if defaults else " (default: the one the index was built with)"),
    )
    p.add_argument(
        "--image_tokenizer",
        default="offline" if defaults else None,
        help="`offline` (built-in substitute; `offline:1` its first version), `seed:<weights folder>` (the real "
        "SEED tokenizer) or `none`"
        + ("" if defaults else " (default: the one the index was built with)"),
    )


def _add_corpus_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--format", default="auto", choices=["auto", "llava", "jsonl", "parquet", "tokens"],
        help="shard format (auto: from the file name: .json llava, .jsonl, .parquet, .u16/.u32 tokens)",
    )  # fmt: skip
    p.add_argument(
        "--image_root", type=Path, default=None, help="folder image paths start from (default: the shard's)"
    )
    p.add_argument("--text_fields", default="text", help="jsonl/parquet: comma-separated text columns")
    p.add_argument("--image_field", default="image", help="jsonl/parquet: image column (path, bytes or {bytes, path})")
    p.add_argument("--id_field", default="id", help="jsonl/parquet: training id column")
    p.add_argument("--modality", default="text", choices=["text", "image"], help="tokens shards: what the ids are")
    p.add_argument(
        "--decode_threads", type=int, default=0,
        help="threads decoding and preparing images of record shards (default 0: the cores this process may use)",
    )  # fmt: skip
    p.add_argument(
        "--image_batch", type=int, default=None,
        help="images per batched image-tokenizer step (default 64; larger suits SEED on a GPU)",
    )  # fmt: skip
    p.add_argument(
        "--no_image_cache", action="store_true",
        help="index/add: do not keep record shards' image tokens in the index (DIR/image_tokens); "
        "scan: tokenize the corpus's images again instead of reading them from there",
    )  # fmt: skip


def _add_settings_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int, default=8, help="n-gram length (the paper: 8)")
    p.add_argument("--threshold", type=int, default=10, help="n-grams seen more often are skipped as frequent")
    p.add_argument("--dedup_docs", action="store_true", help="count documents containing an n-gram, not occurrences")


def _add_run_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--memory", default="1GB", help="memory budget of the build (e.g. 512MB, 4GB)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no_progress", action="store_true", help="hide progress bars")


def add_parser(sub: Any) -> None:
    """Add `contam` and its subcommands to the top-level subparsers."""
    p = sub.add_parser("contam", help="contamination audits: n-gram overlap of benchmarks with training data")
    csub = p.add_subparsers(dest="contam_command", required=True)

    ix = csub.add_parser("index", help="build a new index from corpus shards")
    ix.add_argument("--index", type=Path, required=True, help="index folder (created; must be empty)")
    ix.add_argument("corpus", nargs="+", help="corpus shard files or globs")
    _add_corpus_flags(ix)
    _add_tokenizer_flags(ix, defaults=True)
    _add_settings_flags(ix)
    _add_run_flags(ix)
    ix.add_argument("--engine", default="local", choices=["local", "ray"])

    ad = csub.add_parser("add", help="add shards to an index as a new generation of segments")
    ad.add_argument("--index", type=Path, required=True)
    ad.add_argument("corpus", nargs="+")
    _add_corpus_flags(ad)
    _add_tokenizer_flags(ad, defaults=False)
    ad.add_argument("--engine", default="local", choices=["local", "ray"])
    ad.add_argument("--no_progress", action="store_true")

    cp = csub.add_parser("compact", help="merge every generation of an index into one")
    cp.add_argument("--index", type=Path, required=True)

    st = csub.add_parser("stats", help="print an index's totals and settings as JSON")
    st.add_argument("--index", type=Path, required=True)

    sc = csub.add_parser("scan", help="report benchmark overlap with an index, or with a corpus streamed past it")
    sc.add_argument("--index", type=Path, default=None, help="index folder (omit for a streaming audit of --corpus)")
    sc.add_argument("--tasks", required=True, help="comma-separated task or group names")
    sc.add_argument("--out", type=Path, required=True, help="folder for the report files")
    sc.add_argument("--corpus", nargs="+", default=[], help="corpus shards: training ids of matches, near-duplicates")
    sc.add_argument("--include_path", action="append", default=[], help="extra folder of task YAML files")
    sc.add_argument("--limit", type=int, default=None, help="only the first N docs of each task")
    sc.add_argument("--max_ids", type=int, default=3, help="training ids kept per match")
    sc.add_argument("--near_dup_threshold", type=float, default=0.6, help="MinHash Jaccard of token bigrams")
    sc.add_argument("--no_near_dup", action="store_true", help="skip the near-duplicate question search")
    _add_corpus_flags(sc)
    _add_tokenizer_flags(sc, defaults=False)
    _add_settings_flags(sc)
    _add_run_flags(sc)


def _tokenizers(text_spec: str, image_spec: str) -> tuple[Any, Any]:
    from fastmmeval.contam.image_tokens import make_image_tokenizer
    from fastmmeval.contam.text_tokens import make_text_tokenizer

    return make_text_tokenizer(text_spec), make_image_tokenizer(image_spec)


def _describe(tok: Any, spec: str) -> dict[str, Any] | None:
    if tok is None:
        return None
    unicode = getattr(tok, "unicode_version", None)
    return {"spec": spec, "fingerprint": tok.fingerprint, **({"unicode": unicode} if unicode else {})}


def _unicode_drift(recorded: dict[str, Any], tok: Any) -> str | None:
    """Why the text tokenizer may split some text otherwise than when the index was built, or None."""
    built, here = recorded.get("unicode"), getattr(tok, "unicode_version", None)
    if built is None or here is None or built == here:
        return None
    return (
        f"the index's words were split under Unicode {built}, this Python's is {here}: words holding characters "
        "assigned or re-classified in between may split differently"
    )


def _recorded_image_spec(recorded: dict[str, Any] | None) -> str:
    """The spec that gives the image tokenizer an index was built with: `offline` as recorded names the
    latest version, so the offline tokenizer's version comes from the recorded fingerprint."""
    if recorded is None:
        return "none"
    version = re.fullmatch(r"offline-v(\d+)", str(recorded.get("fingerprint", "")))
    return f"offline:{version[1]}" if version else str(recorded.get("spec", "none"))


def _index_tokenizers(meta: dict[str, Any], args: argparse.Namespace, adding: bool = False) -> tuple[Any, Any]:
    """The tokenizers an index was built with (or the ones given, if their fingerprints agree). Under another
    Unicode version than the build's, adding is refused (the index would mix two splits) and a scan warns."""
    recorded_text = meta.get("text_tokenizer") or {}
    recorded_image = meta.get("image_tokenizer")
    text_spec = args.text_tokenizer or recorded_text.get("spec", "words")
    image_spec = args.image_tokenizer or _recorded_image_spec(recorded_image)
    text_tok, image_tok = _tokenizers(text_spec, image_spec)
    if recorded_text and text_tok.fingerprint != recorded_text.get("fingerprint"):
        raise ConfigError(
            f"--text_tokenizer {text_spec}: fingerprint {text_tok.fingerprint} differs from the index's "
            f"{recorded_text.get('fingerprint')} ({recorded_text.get('spec')}); its n-grams would never match"
        )
    drift = _unicode_drift(recorded_text, text_tok)
    if drift and adding:
        raise ConfigError(f"contam add: {drift}; add with the Python that built the index, or build a new one")
    if drift:
        print(f"fastmmeval: warning: {drift}", file=sys.stderr)
    if image_tok is not None:
        if recorded_image is None:
            raise ConfigError(f"--image_tokenizer {image_spec}: the index was built without image tokens")
        if image_tok.fingerprint != recorded_image.get("fingerprint"):
            raise ConfigError(
                f"--image_tokenizer {image_spec}: fingerprint {image_tok.fingerprint} differs from the index's "
                f"{recorded_image.get('fingerprint')} ({recorded_image.get('spec')})"
            )
    return text_tok, image_tok


def _sources(args: argparse.Namespace, specs: list[str], text_tok: Any, image_tok: Any) -> list[Any]:
    from fastmmeval.contam.corpus import IMAGE_BATCH, open_sources

    return open_sources(
        specs,
        args.format,
        text_tok,
        image_tok,
        args.image_root,
        tuple(f.strip() for f in args.text_fields.split(",") if f.strip()),
        args.image_field or None,
        args.id_field or None,
        args.modality,
        image_batch=args.image_batch or IMAGE_BATCH,
        decode_threads=args.decode_threads,
    )


def _settings(args: argparse.Namespace) -> Any:
    from fastmmeval.contam.settings import IndexSettings

    return IndexSettings(
        n=args.n,
        threshold=args.threshold,
        memory_bytes=parse_memory(args.memory),
        dedup_docs=args.dedup_docs,
        threads=args.threads,
    )


def _print_build(console: Console, stats: dict[str, Any], path: Path) -> None:
    console.print(
        f"indexed {stats['tokens']:,} tokens in {stats['docs']:,} documents ({stats['windows']:,} n-gram windows) "
        f"in {stats['seconds']:.1f} s; images missing or unreadable: {stats['missing_images']}; index: {path}"
    )


def _add(index: Any, sources: list[Any], args: argparse.Namespace) -> dict[str, Any]:
    return index.add(
        sources, engine=args.engine, progress=not args.no_progress, keep_image_tokens=not args.no_image_cache
    )


def main(args: argparse.Namespace) -> int:
    """Run one `contam` subcommand."""
    from fastmmeval.contam.index import NgramIndex

    console = Console()
    command = args.contam_command
    if command == "index":
        text_tok, image_tok = _tokenizers(args.text_tokenizer, args.image_tokenizer)
        sources = _sources(args, args.corpus, text_tok, image_tok)
        meta = {
            "text_tokenizer": _describe(text_tok, args.text_tokenizer),
            "image_tokenizer": _describe(image_tok, args.image_tokenizer),
        }
        index = NgramIndex.create(args.index, _settings(args), meta)
        _print_build(console, _add(index, sources, args), args.index)
    elif command == "add":
        index = NgramIndex.open(args.index)
        text_tok, image_tok = _index_tokenizers(index.meta, args, adding=True)
        sources = _sources(args, args.corpus, text_tok, image_tok)
        _print_build(console, _add(index, sources, args), args.index)
    elif command == "compact":
        NgramIndex.open(args.index).compact()
        console.print(f"compacted {args.index}")
    elif command == "stats":
        print(json.dumps(NgramIndex.open(args.index).stats(), indent=2))
    else:
        _scan(args, console)
    return 0


def _scan(args: argparse.Namespace, console: Console) -> None:
    from dataclasses import replace

    from fastmmeval.contam import thumbnails
    from fastmmeval.contam.index import NgramIndex
    from fastmmeval.contam.report import summary_table, write_report
    from fastmmeval.contam.scan import ScanOptions, scan
    from fastmmeval.tasks import resolve

    if args.index is None and not args.corpus:
        raise ConfigError("contam scan: give --index DIR, or --corpus SHARDS for a streaming audit")
    index = NgramIndex.open(args.index) if args.index is not None else None
    if index is not None:
        text_tok, image_tok = _index_tokenizers(index.meta, args)
        settings = replace(index.settings, threads=args.threads, memory_bytes=parse_memory(args.memory))
    else:
        text_tok, image_tok = _tokenizers(args.text_tokenizer or "words", args.image_tokenizer or "offline")
        settings = _settings(args)
    tasks = resolve((t.strip() for t in args.tasks.split(",") if t.strip()), args.include_path)
    corpus = _sources(args, args.corpus, text_tok, image_tok) if args.corpus else None
    options = ScanOptions(
        settings=settings,
        max_ids=args.max_ids,
        near_dup_threshold=None if args.no_near_dup else args.near_dup_threshold,
        limit=args.limit,
        progress=not args.no_progress,
        image_cache=not args.no_image_cache,
    )
    report = scan(tasks, text_tok, image_tok, options, index=index, corpus=corpus)
    report["settings"] = {
        "mode": "index" if index is not None else "stream",
        "index": None if args.index is None else str(args.index),
        "corpus": list(args.corpus),
        "n": settings.n,
        "threshold": settings.threshold,
        "dedup_docs": settings.dedup_docs,
        "text_tokenizer": _describe(text_tok, args.text_tokenizer or text_tok.name),
        "image_tokenizer": _describe(image_tok, args.image_tokenizer or getattr(image_tok, "name", "none")),
        "near_dup_threshold": options.near_dup_threshold,
    }
    paths = write_report(args.out, report, thumbnails.collect(report, tasks, corpus))
    console.print(summary_table(report))
    missing = {k: v["missing_images"] for k, v in report["corpus"].items() if v.get("missing_images") is not None}
    console.print(f"images missing or unreadable in the corpus: {missing}")
    streamed = report["corpus"].get("streamed", {})
    if not streamed.get("images_read", True):
        console.print("the corpus was streamed again without its images: no image n-gram matched the index")
    cached = streamed.get("image_cache")
    if cached:
        console.print(
            f"image tokens of {cached['read']} shard(s) read from the index's image cache; images decoded again "
            f"for {cached['stale']} whose images changed since and {cached['absent']} the index has no entry for"
        )
    console.print("report: " + ", ".join(str(p) for p in paths))
