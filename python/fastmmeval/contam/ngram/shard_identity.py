"""Which shards an index already holds, so that adding a shard again skips it instead of counting it twice.

Each generation of an index records every shard it holds (`shards` in the manifest: name, identity, when
added). A shard's identity is what decides its tokens: its file(s) (resolved path, size, modification time in
ns) and the reader settings that change what is read; a source that cannot describe itself (no `identity()`)
has none and is never matched. Generations written before identities were recorded hold shards of unknown
identity: a shard added again under the same name is then added, with a warning saying so.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastmmeval.contam.ngram.settings import ShardSource


def file_identity(path: Path) -> list[Any]:
    """[resolved path, size, modification time in ns] of a file (size and time None if it cannot be read)."""
    path = Path(path)
    try:
        st = os.stat(path)
    except (OSError, ValueError):  # ValueError: a NUL byte in the path
        return [str(path.absolute()), None, None]
    return [str(path.resolve()), st.st_size, st.st_mtime_ns]


def identity_of(source: ShardSource) -> dict[str, Any] | None:
    """The source's identity as the manifest stores it (JSON types only), None for a source without one."""
    identity = getattr(source, "identity", None)
    return None if identity is None else json.loads(json.dumps(identity()))


def generation_name(generation: dict[str, Any]) -> str:
    """A generation as its segment folder names it: g000003 (an add), c000004 (a compact)."""
    return f"{'c' if generation['kind'] == 'compact' else 'g'}{generation['id']:06d}"


def shards_of(generation: dict[str, Any]) -> list[dict[str, Any]]:
    """The shards a generation holds (one written before identities were recorded: its sources, identity None)."""
    return generation.get("shards", [{"name": name, "identity": None} for name in generation["sources"]])


@dataclass(frozen=True)
class Plan:
    """What an add does with its sources: those to add, the `shards` record of its generation (without the
    time added), and a line for each shard skipped or added unrecognized."""

    sources: list[ShardSource]
    shards: list[dict[str, Any]]
    skipped: list[str]
    unrecognized: list[str]


def plan_add(sources: Sequence[ShardSource], generations: Sequence[dict[str, Any]]) -> Plan:
    """Split `sources` into the shards the index (`generations`) does not hold yet and those it holds, or that
    an earlier source of the same add already is."""
    held: dict[str, str] = {}
    unknown: dict[str, str] = {}
    for gen in generations:
        for shard in shards_of(gen):
            where = f"generation {generation_name(gen)}"
            if shard["identity"] is None:
                unknown.setdefault(shard["name"], where)
            else:
                added = shard.get("added", "at an unknown time")
                held.setdefault(_key(shard["identity"]), f"already in the index ({where}, added {added})")
    plan = Plan([], [], [], [])
    for source in sources:
        identity = identity_of(source)
        key = None if identity is None else _key(identity)
        if key in held:
            plan.skipped.append(f"{source.name}: {held[key]}; skipped")
            continue
        if source.name in unknown:
            plan.unrecognized.append(
                f"{source.name}: a shard of this name is in the index ({unknown[source.name]}, written before "
                "shard identities were recorded), so it may be the same; added"
            )
        if key is not None:
            held[key] = f"the same shard as {source.name}, given before it in this add"
        plan.sources.append(source)
        plan.shards.append({"name": source.name, "identity": identity})
    return plan


def stamped(shards: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The shards with the time they are added (UTC, to the second)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return [{**shard, "added": now} for shard in shards]


def _key(identity: dict[str, Any]) -> str:
    return json.dumps(identity, sort_keys=True)
