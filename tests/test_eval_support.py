"""Synthetic labelled corpora for the eval tests (made here, never read from shared data)."""

from __future__ import annotations

import random
from pathlib import Path

STOP = ["the", "a", "is", "was", "there", "said", "of", "and", "to", "in"]


def vocabulary(seed: int, size: int = 400) -> list[str]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(size)]


def article(seed: int, sentences: int = 25) -> str:
    """A news-like text: stop words, content words, commas and full stops."""
    rng = random.Random(seed)
    words = vocabulary(seed)
    out = []
    for _ in range(sentences):
        parts = []
        for _ in range(rng.randint(2, 4)):
            clause = [rng.choice(STOP), *rng.sample(words, 3), rng.choice(STOP), rng.choice(words)]
            parts.append(" ".join(clause))
        sentence = ", ".join(parts)
        out.append(sentence[0].upper() + sentence[1:] + ".")
    return " ".join(out)


def edit(text: str, seed: int, fraction: float = 0.03) -> str:
    """A near duplicate: replace a few words, drop the last sentence, add a byline."""
    rng = random.Random(seed)
    tokens = text.split(" ")
    for _ in range(max(1, int(len(tokens) * fraction))):
        tokens[rng.randrange(len(tokens))] = "edited"
    body = " ".join(tokens)
    body = body[: body.rfind(".", 0, len(body) - 1) + 1]
    return f"By Agency Staff. {body} Copyright agency."


def html_page(title: str, body: str, site: int) -> str:
    nav = " | ".join(f"Section{site}{k}" for k in range(8))
    return (
        f"<html><head><title>{title}</title><script>var x{site} = 1;</script>"
        f"<style>p {{ color: red }}</style></head><body><div class='nav'>{nav}</div>"
        f"<article><h1>{title}</h1><p>{body}</p></article>"
        f"<footer>Site {site} footer text &amp; links</footer></body></html>"
    )


def write_cluster_corpus(root: Path, clusters: int = 4, size: int = 3) -> Path:
    """``root/cN/pK.html``: every cluster an article and ``size - 1`` edited copies."""
    root.mkdir(parents=True, exist_ok=True)
    for c in range(clusters):
        folder = root / f"c{c}"
        folder.mkdir()
        base = article(100 + c)
        for k in range(size):
            body = base if k == 0 else edit(base, 1000 * c + k)
            page = html_page(f"Story {c} version {k}", body, site=k)
            encoding = "latin-1" if k == 1 else "utf-8"
            folder.joinpath(f"p{k}.html").write_bytes(page.encode(encoding))
    return root
