"""Deterministic news-like items with known near and exact duplicates, for tests."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

WORDS = (  # noqa: SIM905 - prose is easier to read than a list
    "government minister said on tuesday that the new budget would cut taxes for "
    "families while raising spending on hospitals schools and railways across the "
    "country opposition leaders called the plan reckless and warned of higher debt "
    "markets rose sharply after the announcement investors welcomed signs of growth "
    "police reported that the fire started near the harbour late at night and "
    "firefighters fought the flames for hours before residents returned home"
).split()
NAMES = ["Rossi", "Müller", "Dubois", "Okafor", "Tanaka", "García", "Novak", "Larsen"]
PLACES = ["Rome", "Berlin", "Lyon", "Lagos", "Osaka", "Madrid", "Prague", "Oslo"]


def story(rnd: random.Random, words: int) -> str:
    out: list[str] = []
    while len(out) < words:
        sentence = rnd.choices(WORDS, k=rnd.randint(8, 16))
        sentence.insert(rnd.randrange(len(sentence)), rnd.choice(NAMES))
        sentence.insert(rnd.randrange(len(sentence)), rnd.choice(PLACES))
        sentence.append(str(rnd.randint(2, 2000)))
        out.extend(sentence)
        out[-1] += "."
    return " ".join(out)


def edit(rnd: random.Random, text: str, edits: int) -> str:
    words = text.split()
    for _ in range(edits):
        i = rnd.randrange(len(words))
        op = rnd.random()
        if op < 0.5:
            words[i] = rnd.choice(WORDS)
        elif op < 0.8:
            words.insert(i, rnd.choice(NAMES))
        elif len(words) > 10:
            words.pop(i)
    return " ".join(words)


def items(n: int, seed: int = 1, channels: int = 3, words: int = 80,
          start: datetime | None = None, step_s: float = 20.0) -> list[dict[str, Any]]:
    """``n`` items; about a third are near or exact re-sends of an earlier item."""
    rnd = random.Random(seed)
    t = start or datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
    out: list[dict[str, Any]] = []
    for i in range(n):
        channel = f"ch{rnd.randrange(channels)}"
        same = [x for x in out[-60:] if x["channel"] == channel]
        roll = rnd.random()
        if same and roll < 0.1:
            text = rnd.choice(same)["text"]
        elif same and roll < 0.35:
            text = edit(rnd, rnd.choice(same)["text"], rnd.randint(1, 6))
        else:
            text = story(rnd, words)
        t += timedelta(seconds=step_s * rnd.random() * 2)
        out.append({"id": f"n{i}", "channel": channel, "title": f"Story {i}",
                    "text": text, "timestamp": t.isoformat().replace("+00:00", "Z")})
    return out
