"""The per-item facts (core.novelty.figures) of the faster code equal the released ones
byte for byte (tests/facts_reference.py, frozen at 3588269), with the C kernels and
without them: they are persisted per window document and decide the novelty rule, so a
changed byte would change decisions or read old state differently."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ndd_stream.core import kernels, quantities
from ndd_stream.core.headline import headline_words
from ndd_stream.core.novelty import figures
from ndd_stream.core.subject import subject
from tests import facts_reference as ref

ASCII_PARTS = ["1", "25", "8.7", "1,250", "0.005", "3.4.87", "1,914,388", "07", "12..3", ".5",
               "5.", ",", ".", " ", "  ", "-", " - ", "\n", "\r\n", "\n\n", "\t", "\r", "mln",
               "MLN", "Mln", "million", "Millions", "billion", "BILLIONS", "bln", "thousand",
               "Thousand", "trillion", "TRILLION", "millionx", "mlns", "_", "dlrs", "pct", "cts",
               "tonnes", "vs", "Shr", "<ACME>", "<SUN CO>", "ACME", "Acme", "acme", "Sun", "SUN",
               "Sunco", "Unocal", "RAISES", "raised", "CRUDE", "crude", "3RD", "QTR", "x", "a",
               "corrected"]
UNICODE_PARTS = ["é", "Éclat", "ÉCLAT", "٣", "İ", "ſ", "\u212a", "²", "ß", "—", "\u00a0"]


@contextmanager
def _without_kernels() -> Iterator[None]:
    """The numpy-only installation's path (process-wide switch, restored)."""
    saved = kernels._C
    kernels._C = None
    try:
        yield
    finally:
        kernels._C = saved


def _check(text: str) -> None:
    want = ref.figures(text)
    assert figures(text) == want, text
    assert subject(text) == ref.subject(text), text
    assert headline_words(text) == ref.headline_words(text), text
    assert quantities.tokens(text) == ref.tokens(text) == ref.tokens_reference(text), text
    with _without_kernels():
        assert figures(text) == want, text
        assert quantities.tokens(text) == ref.tokens(text), text


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(ASCII_PARTS), max_size=30))
def test_facts_equal_the_released_ones(parts: list[str]) -> None:
    """ASCII text (the fast paths): figures with separators, scale words in any case after
    every kind of gap, tickers, headlines and subjects."""
    _check("".join(parts))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(ASCII_PARTS + UNICODE_PARTS), max_size=20))
def test_facts_equal_the_released_ones_on_unicode(parts: list[str]) -> None:
    """Text with non-ASCII characters (the general path; ``ſ`` and the Kelvin sign match
    ``s`` and ``k`` under IGNORECASE)."""
    _check("".join(parts))


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="0123456789.,  -\t\r\nmlnbiothusadrMLNBIOTHUSADR_x", max_size=80))
def test_facts_equal_the_released_ones_on_any_string(text: str) -> None:
    """Free strings over the characters the figure scan looks at."""
    _check(text)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(["a", "Ab", "x1", "7"]),
                          st.text(alphabet="abcDEF12", min_size=6, max_size=36)),
                min_size=20, max_size=400),
       st.lists(st.sampled_from([" ", "  ", ",", " - ", "_", "."]), min_size=1, max_size=5),
       st.integers(0, 4))
def test_headline_words_of_a_long_first_line(words: list[str], seps: list[str],
                                             newline_after: int) -> None:
    """Pages' text is often one line of thousands of characters; the headline's words come
    from a prefix when it holds enough distinct ones. Words of 6-36 characters put about
    MAX_WORDS of them in the first prefix, so the cut falls inside words and the prefix
    holds just under, at or just over MAX_WORDS distinct ones; short repeated words make
    it come up short."""
    text = "".join(w + seps[i % len(seps)] for i, w in enumerate(words))
    if newline_after:
        text = text[: newline_after * 700] + "\n" + text[newline_after * 700:]
    assert headline_words(text) == ref.headline_words(text)
    assert figures(text) == ref.figures(text)


def _words(n: int, width: int, start: int = 0) -> list[str]:
    return [f"w{i:0{width - 1}d}" for i in range(start, start + n)]


@pytest.mark.parametrize("text", [
    # 23 distinct words, then one that runs across the first cut (512): its part before the
    # cut is not a word of the line
    " ".join(_words(23, 20)) + " " + "x" * 60 + " " + " ".join(_words(30, 20, 100)),
    # 23 distinct words and blanks up to the cut: the 24th comes after it
    " ".join(_words(23, 20)) + " " * 60 + " ".join(_words(30, 20, 100)),
    # 24 distinct words, the last of them running on across the cut
    " ".join(_words(24, 20)) + "y" * 200,
    # repeats: few distinct words in the first prefixes
    " ".join(["same"] * 300 + _words(40, 8)),
])
def test_headline_words_at_the_prefix_cut(text: str) -> None:
    assert len(text) > 512
    assert headline_words(text) == ref.headline_words(text)


def _reuters_like(rnd: random.Random) -> str:
    name = rnd.choice(["UNOCAL", "Sun Co", "ARBOR DRUGS INC", "Bank of Norland", "USX"])
    fig = [f"{rnd.randint(1, 999)}.{rnd.randint(0, 9)}" for _ in range(6)]
    body = rnd.choice([
        f"{name} said it raised crude postings {rnd.randint(1, 90)} cts a barrel to "
        f"{fig[0]} dlrs, effective today. {name.split()[0].title()} said the move follows...",
        f"Shr {rnd.randint(1, 99)} cts vs {rnd.randint(1, 99)} cts\n    Net {fig[1]} mln vs "
        f"{fig[2]} mln\n    Revs {fig[3]} mln vs {rnd.randint(1, 9)},{rnd.randint(100, 999)},"
        f"{rnd.randint(100, 999)}\n Reuter",
        f"The bank provided {fig[4]} mln stg of assistance; the shortage was forecast at "
        f"{fig[5]} billion-\n  stg, rates 9-{rnd.randint(1, 15)}/16 pct, "
        f"{rnd.randint(2, 9)} Billion Dlrs in {rnd.randint(1, 12)}.{rnd.randint(1, 28)}.87.",
        f"CORRECTED - {name} offer of {fig[0]} Thousand shares at {fig[1]} dlrs, "
        f"{rnd.randint(1, 5)},000 tonnes in 1987/88 and {rnd.randint(1, 5)} trillion yen.",
    ])
    return f"{name} {rnd.choice(['RAISES', 'SETS', '3RD QTR', '<ACME>'])} NET\n{body}"


def test_facts_equal_the_released_ones_on_realistic_items() -> None:
    """Agency-like items (earnings tables, money market and commodity reports, postings,
    corrections) and the benchmark's ~5 KB synthetic news."""
    from bench.workload import NewsStream

    rnd = random.Random(21)
    for i in range(600):
        text = _reuters_like(rnd)
        _check(text.replace("\n", "\r\n") if i % 3 == 0 else text)  # some with CRLF
    for doc in NewsStream().take(60):
        _check(doc.text)


def test_every_scale_word_holds_a_needle_at_its_offset() -> None:
    """The Python path finds scale words by these needles: each must be found so."""
    for word in quantities.SCALES:
        assert any(word.find(needle) == offset for needle, offset in quantities._NEEDLES), word


@pytest.mark.parametrize("text, want", [
    ("Net 1.5 mln vs 1,500,000\n", "1.5_mln 1,500,000"),
    ("1 Millions 2 millionx 3-\n thousand 4\n\nmln", "1_millions 2 3_thousand 4"),
])
def test_tokens_as_written(text: str, want: str) -> None:
    """The figure tokens as they must be written (the first line's words come first in
    ``figures``)."""
    assert " ".join(ref.tokens(text).values()) == " ".join(quantities.tokens(text).values())
    assert " ".join(quantities.tokens(text).values()) == want
