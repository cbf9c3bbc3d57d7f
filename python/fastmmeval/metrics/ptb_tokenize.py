"""Caption tokenization without Java: what pycocoevalcap's PTBTokenizer (Stanford PTBTokenizer 3.4.1,
-preserveLines -lowerCase, then pycocoevalcap's punctuation removal) makes of an ordinary caption."""

from __future__ import annotations

import re

# pycocoevalcap's PTBTokenizer drops these tokens after tokenizing. Its -lowerCase output writes
# brackets as "-lrb-" etc., which the upper-case entries never match, so brackets stay as words.
PUNCTUATIONS = frozenset(
    ["''", "'", "``", "`", "-LRB-", "-RRB-", "-LCB-", "-RCB-", ".", "?", "!", ",", ":", "-", "--", "...", ";"]
)

_CHARS = str.maketrans(
    {
        "\n": " ", "\r": " ", "’": "'", "‘": " ` ", '"': " '' ", "“": " `` ", "”": " '' ",
        "—": " -- ", "–": " -- ", "…": " ... ", "€": "$", "£": "#",
        "½": " 1/2 ", "¼": " 1/4 ", "¾": " 3/4 ",
        "(": " -LRB- ", ")": " -RRB- ", "[": " -LSB- ", "]": " -RSB- ", "{": " -LCB- ", "}": " -RCB- ",
    }
)  # fmt: skip
_SPLITS = [
    (re.compile(r"(?<=\w)(n't|'(?:s|re|ve|ll|d|m))(?!\w)", re.IGNORECASE), r" \1"),
    (re.compile(r"(?<!\w)('t)(is|was)\b", re.IGNORECASE), r"\1 \2"),
    (re.compile(r"(?<=\d:\d\d)(am|pm)\b", re.IGNORECASE), r" \1"),
    (re.compile(r"\b(can)(not)\b|\b(gon|wan)(na)\b|\b(got)(ta)\b|\b(lem|gim)(me)\b", re.IGNORECASE),
     lambda m: " ".join(g for g in m.groups() if g)),
]  # fmt: skip
_ABBREVIATIONS = (
    "mr|mrs|ms|dr|st|jr|sr|vs|etc|inc|corp|co|ltd|mt|ft|prof|gen|gov|sen|rep|rev|lt|col|sgt|capt|ave|blvd"
    "|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
# Words after which PTBTokenizer 3.4.1 takes an initial's period ("c. The") for a sentence end.
_SENTENCE_STARTS = (
    "The|THE|This|That|These|It|A|An|He|She|We|You|They|Her|Our|Their|In|At|As|If|When|While|After|Since"
    "|But|So|Then|However|There|Here|Now|Some|One|Many|What|Mr\\.|Ms\\."
)
_TOKEN = re.compile(
    rf"""
      -[LR][RSC]B-                                        # a bracket, as PTBTokenizer writes it
    | n't | '(?:s|re|ve|ll|d|m|t)(?!\w)                   # clitics (split off by _SPLITS)
    | https?://[^\s<>]*[^\s<>.,;:!?'"]                    # URLs
    | (?:[^\W\d_]\.){{2,}}                                # acronyms: u.s.a., p.m.
    | (?:{_ABBREVIATIONS})\.(?!\w) | no\.(?=\s*\d)        # abbreviations that keep their period
    | (?<!\S)[^\W\d_]\.(?!\w)(?!\s+(?-i:{_SENTENCE_STARTS})(?!\w))  # an initial, unless a sentence starts
    | (?:(?<!\w)'(?=\d)|[#@](?=[^\W\d_]))?\w+           # words and numbers, with their inner
      (?:(?:[-./@!?]|(?<=[^\W\d_])'(?=[^\W\d_])|(?<=\d)[,:](?=\d))\w+)*  # - . / @ ! ?, o'clock, 1,000 10:30
    | \.\.\. | --+ | [?!]{{2,}} | `` | ''                  # punctuation runs
    | \S                                                  # any other character
    """,
    re.VERBOSE | re.IGNORECASE,
)


def tokenize(text: str) -> str:
    """Lower-cased PTB-style tokens of `text` without punctuation, joined by single spaces: what
    pycocoevalcap's PTBTokenizer (Java) makes of an ordinary caption."""
    text = text.translate(_CHARS)
    for pattern, replacement in _SPLITS:
        text = pattern.sub(replacement, text)
    tokens = []
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token.startswith("--"):
            token = "--"
        elif len(token) == 1 and ord(token) > 0xFFFF:
            continue  # PTBTokenizer drops characters outside the BMP (emoji) as untokenizable
        token = token.lower()
        if token not in PUNCTUATIONS:
            tokens.append(token)
    return " ".join(tokens)
