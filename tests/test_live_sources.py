"""The sites registry: the shipped list of the paper's Table 28, a user's file of the same shape, one
error line for a bad entry, and the allowlist built from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastmmeval.errors import ConfigError
from fastmmeval.live.records import Source
from fastmmeval.live.sources import allowed_hosts, host_allowed, load_sources


def test_the_shipped_registry_lists_the_papers_sites() -> None:
    sources = load_sources()
    assert len(sources) >= 60
    names = {s.name for s in sources}
    families = ("bbc", "cnn", "bloomberg", "wsj", "reuters", "a16z", "hacker-news", "reddit", "crunchbase", "cctv",
                "xinhua", "asahi")
    assert all(any(n.startswith(family) for n in names) for family in families)
    assert {s.language for s in sources} == {"en", "zh", "ja"}
    assert all(s.url.startswith("https://") and s.category for s in sources)


def test_a_user_registry(tmp_path: Path) -> None:
    path = tmp_path / "sites.yaml"
    path.write_text("sources:\n  - {name: hn, url: 'https://news.ycombinator.com/', category: forum}\n"
                    "  - {name: asahi, url: 'https://www.asahi.com/', language: ja}\n")
    assert load_sources(path) == [Source("hn", "https://news.ycombinator.com/", "forum", "en"),
                                  Source("asahi", "https://www.asahi.com/", "", "ja")]


@pytest.mark.parametrize(("text", "message"), [
    ("sources: [{name: a, url: 'ftp://x.org/'}]", r"sources\[0\]\.url: 'ftp://x.org/' is not an http\(s\) URL"),
    ("sources: [{name: a, url: 'https://a.org/'}, {url: 'https://b.org/'}]", r"sources\[1\]: no `name`"),
    ("sources: [{name: a, url: 'https://a.org/'}, {name: a, url: 'https://b.org/'}]",
     r"sources\[1\]\.name: 'a' is already sources\[0\]'s name"),
    ("sources: [{name: a, url: 'https://a.org/', langauge: en}]", r"sources\[0\]: unknown field 'langauge'"),
    ("sources: [{name: a, url: 'https://a.org/', language: 'english!'}]", r"sources\[0\]\.language: 'english!'"),
    ("sources: [{name: 'a b', url: 'https://a.org/'}]", r"sources\[0\]\.name: 'a b' is not a name"),
    ("sources: ['https://a.org/']", r"sources\[0\]: expected a mapping"),
    ("sites: []", "expected a mapping with one key, `sources`"),
    ("sources: [", "not valid YAML"),
])
def test_a_bad_entry_is_one_error_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "sites.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as error:
        load_sources(path)
    assert str(error.value).startswith(f"{path}: ") and "\n" not in str(error.value)


def test_the_allowlist_is_the_sources_hosts_and_extra_ones() -> None:
    sources = [Source("bbc", "https://www.bbc.com/news"), Source("hn", "https://news.ycombinator.com/")]
    allowed = allowed_hosts(sources, extra=["BBCI.co.uk"])
    assert allowed == {"www.bbc.com", "news.ycombinator.com", "bbci.co.uk"}
    assert host_allowed("ichef.bbci.co.uk", allowed) and host_allowed("WWW.BBC.COM", allowed)
    assert not host_allowed("bbc.com", allowed) and not host_allowed("evilbbci.co.uk", allowed)
