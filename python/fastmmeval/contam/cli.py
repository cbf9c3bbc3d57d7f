"""`fastmmeval contam index | add | compact | scan | stats`: contamination audits from the command line. It
parses arguments, calls the `fastmmeval.contam` API and prints."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastmmeval.argtypes import int_range, name_list, non_negative_int, positive_int, unit_float
from fastmmeval.console import print_table, stdout_console
from fastmmeval.errors import ConfigError
from fastmmeval.images import image_flags

if TYPE_CHECKING:
    from rich.console import Console

    from fastmmeval.contam import Tokenizers

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
        "--decode_threads", type=non_negative_int, default=0,
        help="threads decoding and preparing images of record shards (default 0: the cores this process may use)",
    )  # fmt: skip
    p.add_argument(
        "--image_batch", type=positive_int, default=None,
        help="images per batched image-tokenizer step (default 64; larger suits SEED on a GPU)",
    )  # fmt: skip
    p.add_argument(
        "--no_image_cache", action="store_true",
        help="index/add: do not keep record shards' image tokens in the index (DIR/image_tokens); "
        "scan: tokenize the corpus's images again instead of reading them from there",
    )  # fmt: skip
    image_flags(p, (
        "an image (of the corpus; with scan, of the benchmark too) declaring more pixels is not decoded and counts "
        "as unreadable",
        "read absolute image paths of record shards (with scan, of the benchmark too); refused by default, like "
        "relative paths leaving the image root",
    ))  # fmt: skip


def _add_fsync_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--fsync", action="store_true",
        help="publish new segments only once they are on disk, so that a power cut cannot leave a truncated "
        "one (without, the next open refuses such a segment by name); slower, see docs/benchmarks.md",
    )  # fmt: skip


def _add_settings_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int_range(1, 64), default=8, help="n-gram length (the paper: 8)")
    p.add_argument(
        "--threshold", type=int_range(0, 254), default=10, help="n-grams seen more often are skipped as frequent"
    )
    p.add_argument("--dedup_docs", action="store_true", help="count documents containing an n-gram, not occurrences")


def _add_run_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--memory", default="1GB", help="memory budget of the build (e.g. 512MB, 4GB)")
    p.add_argument("--threads", type=positive_int, default=2)
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
    _add_fsync_flag(ix)
    ix.add_argument("--engine", default="local", choices=["local", "ray"])

    ad = csub.add_parser("add", help="add shards to an index as a new generation of segments")
    ad.add_argument("--index", type=Path, required=True)
    ad.add_argument("corpus", nargs="+")
    _add_corpus_flags(ad)
    _add_tokenizer_flags(ad, defaults=False)
    ad.add_argument("--engine", default="local", choices=["local", "ray"])
    ad.add_argument("--no_progress", action="store_true")
    _add_fsync_flag(ad)

    cp = csub.add_parser("compact", help="merge every generation of an index into one")
    cp.add_argument("--index", type=Path, required=True)
    _add_fsync_flag(cp)

    st = csub.add_parser("stats", help="print an index's totals and settings as JSON")
    st.add_argument("--index", type=Path, required=True)

    sc = csub.add_parser("scan", help="report benchmark overlap with an index, or with a corpus streamed past it")
    sc.add_argument("--index", type=Path, default=None, help="index folder (omit for a streaming audit of --corpus)")
    sc.add_argument("--tasks", required=True, type=name_list, help="comma-separated task or group names")
    sc.add_argument("--out", type=Path, required=True, help="folder for the report files")
    sc.add_argument("--corpus", nargs="+", default=[], help="corpus shards: training ids of matches, near-duplicates")
    sc.add_argument("--include_path", action="append", default=[], help="extra folder of task YAML files")
    sc.add_argument("--limit", type=positive_int, default=None, help="only the first N docs of each task")
    sc.add_argument("--max_ids", type=non_negative_int, default=3, help="training ids kept per match")
    sc.add_argument("--near_dup_threshold", type=unit_float, default=0.6, help="MinHash Jaccard of token bigrams")
    sc.add_argument("--no_near_dup", action="store_true", help="skip the near-duplicate question search")
    _add_corpus_flags(sc)
    _add_tokenizer_flags(sc, defaults=False)
    _add_settings_flags(sc)
    _add_run_flags(sc)


def _warn(message: str) -> None:
    print(f"fastmmeval: warning: {message}", file=sys.stderr)


def _sources(args: argparse.Namespace, specs: list[str], tokenizers: Tokenizers) -> list[Any]:
    from fastmmeval.contam import IMAGE_BATCH, open_sources

    return open_sources(
        specs,
        args.format,
        tokenizers.text,
        tokenizers.image,
        args.image_root,
        tuple(f.strip() for f in args.text_fields.split(",") if f.strip()),
        args.image_field or None,
        args.id_field or None,
        args.modality,
        image_batch=IMAGE_BATCH if args.image_batch is None else args.image_batch,
        decode_threads=args.decode_threads,
        max_pixels=args.max_image_pixels,
        allow_absolute_paths=args.allow_absolute_image_paths,
    )


def _settings(args: argparse.Namespace) -> Any:
    from fastmmeval.contam import IndexSettings

    return IndexSettings(
        n=args.n,
        threshold=args.threshold,
        memory_bytes=parse_memory(args.memory),
        dedup_docs=args.dedup_docs,
        threads=args.threads,
    )


def _print_build(console: Console, stats: dict[str, Any], path: Path) -> None:
    for line in stats["skipped"]:
        print(line)
    for line in stats["unrecognized"]:
        _warn(line)
    if stats["generation"] is None:
        print(f"nothing added: the index holds every shard given; index: {path}")
        return
    console.print(
        f"indexed {stats['tokens']:,} tokens in {stats['docs']:,} documents ({stats['windows']:,} n-gram windows) "
        f"in {stats['seconds']:.1f} s; images missing or unreadable: {stats['missing_images']}; index: {path}",
        soft_wrap=True,
    )
    named = stats["missing_image_refs"]
    if named:
        print(f"first {len(named)} of the {stats['missing_images']:,} images not read (also in {path}/manifest.json):")
        for ref in named:
            print(f"  {ref}")


def _add(index: Any, sources: list[Any], args: argparse.Namespace) -> dict[str, Any]:
    return index.add(
        sources, engine=args.engine, progress=not args.no_progress, keep_image_tokens=not args.no_image_cache,
        durable=args.fsync,
    )  # fmt: skip


def main(args: argparse.Namespace) -> int:
    """Run one `contam` subcommand."""
    from fastmmeval.contam import NgramIndex, choose_tokenizers, index_tokenizers

    console = stdout_console()
    command = args.contam_command
    if command == "index":
        tokenizers = choose_tokenizers(args.text_tokenizer, args.image_tokenizer)
        sources = _sources(args, args.corpus, tokenizers)
        index = NgramIndex.create(args.index, _settings(args), tokenizers.describe())
        _print_build(console, _add(index, sources, args), args.index)
    elif command == "add":
        index = NgramIndex.open(args.index)
        tokenizers = index_tokenizers(index.meta, args.text_tokenizer, args.image_tokenizer, adding=True)
        sources = _sources(args, args.corpus, tokenizers)
        _print_build(console, _add(index, sources, args), args.index)
    elif command == "compact":
        NgramIndex.open(args.index).compact(durable=args.fsync)
        console.print(f"compacted {args.index}")
    elif command == "stats":
        print(json.dumps(NgramIndex.open(args.index).stats(), indent=2))
    else:
        _scan(args, console)
    return 0


def _scan(args: argparse.Namespace, console: Console) -> None:
    from dataclasses import replace

    from fastmmeval.contam import (
        NgramIndex,
        ScanOptions,
        audit_tasks,
        choose_tokenizers,
        index_tokenizers,
        summary_lines,
        summary_table,
        write_audit,
    )
    from fastmmeval.tasks import resolve

    if args.index is None and not args.corpus:
        raise ConfigError("contam scan: give --index DIR, or --corpus SHARDS for a streaming audit")
    _check_out_folder(args.out)
    index = NgramIndex.open(args.index) if args.index is not None else None
    if index is not None:
        tokenizers = index_tokenizers(index.meta, args.text_tokenizer, args.image_tokenizer, warn=_warn)
        settings = replace(index.settings, threads=args.threads, memory_bytes=parse_memory(args.memory))
    else:
        tokenizers = choose_tokenizers(args.text_tokenizer or "words", args.image_tokenizer or "offline")
        settings = _settings(args)
    names = (t.strip() for t in args.tasks.split(",") if t.strip())
    # The benchmark's images are read under the same cap and path rule as the corpus's.
    tasks = resolve(names, args.include_path, args.max_image_pixels, args.allow_absolute_image_paths)
    corpus = _sources(args, args.corpus, tokenizers) if args.corpus else None
    options = ScanOptions(
        settings=settings,
        max_ids=args.max_ids,
        near_dup_threshold=None if args.no_near_dup else args.near_dup_threshold,
        limit=args.limit,
        progress=not args.no_progress,
        image_cache=not args.no_image_cache,
    )
    report = audit_tasks(tasks, tokenizers, options, index=index, corpus=corpus, corpus_specs=args.corpus)
    try:
        paths = write_audit(args.out, report, tasks, corpus)
    except OSError as e:  # a full disk: each report file is written whole or not at all
        raise ConfigError(f"--out {args.out}: cannot write the report ({e})") from e
    print_table(summary_table(report), console)
    for line in summary_lines(report):
        console.print(line)
    console.print("report: " + ", ".join(str(p) for p in paths))


def _check_out_folder(out: Path) -> None:
    """A ConfigError, before any work, when --out cannot be a folder to write the report in."""
    for folder in (out, *out.parents):
        if folder.exists():
            if not folder.is_dir():
                what = "is a file, not a folder" if folder == out else f"cannot be created: {folder} is a file"
                raise ConfigError(f"--out {out}: {what}")
            if not os.access(folder, os.W_OK | os.X_OK):
                raise ConfigError(f"--out {out}: {folder} is not writable")
            return
