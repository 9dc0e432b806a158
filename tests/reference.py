"""A brute-force DDD reference: all-pairs doc_q over the window, straight from the
definitions (Def. 3.32-3.33, §3.6), with Python sets of q-gram strings and no pruning.

Kept deliberately naive; the detector must agree with it decision for decision.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from fractions import Fraction

from ndd_stream.core.document import Document
from ndd_stream.core.normalize import normal_form


@dataclass(frozen=True)
class RefDecision:
    identity: str
    status: str
    duplicate_of: str | None
    similarity: float
    novel: str | None = None  # reason when the best match was judged another report
    resembles: str | None = None
    only_new: tuple[str, ...] = ()
    only_old: tuple[str, ...] = ()
    # its story (first item's identity), and the story's members and channels in the window
    story: str = ""
    story_size: int = 0
    story_channels: tuple[str, ...] = ()
    supersedes: str | None = None  # keep="complete": the story's version it replaces


def qgram_set(nf: str, q: int) -> set[str]:
    return {nf[i : i + q] for i in range(len(nf) - q + 1)}


_SCALES = {"thousand": 3, "mln": 6, "million": 6, "millions": 6, "bln": 9, "billion": 9,
           "billions": 9, "trillion": 12}


def figures(text: str) -> dict[str, tuple[str, int]]:
    """Figure key -> (as first written, power of the scale word of its first occurrence that
    has one; -1 when none has)."""
    out: dict[str, tuple[str, int]] = {}
    pattern = r"(\d+(?:[.,]\d+)*)(?:[ \t-]*\r?\n?[ \t]*(" + "|".join(_SCALES) + r")\b)?"
    for m in re.finditer(pattern, text, re.IGNORECASE):
        key = m.group(1).replace(",", "")
        raw, power = out.get(key, (m.group(1), -1))
        if power < 0 and m.group(2):
            power = _SCALES[m.group(2).lower()]
        out[key] = (raw, power)
    return out


def _same(x: tuple[str, int], y: tuple[str, int]) -> bool:
    """Same quantity up to the rounding of the coarser (exact fractions)."""
    def parsed(f: tuple[str, int]) -> tuple[Fraction, Fraction, bool] | None:
        raw, power = f
        plain = raw.replace(",", "")
        if not re.fullmatch(r"\d+(?:,\d+)*(?:\.\d+)?", raw):
            return None
        scale = Fraction(10) ** max(power, 0)
        unit = scale / Fraction(10) ** len(plain.partition(".")[2])
        return Fraction(plain) * scale, unit, power >= 0
    px, py = parsed(x), parsed(y)
    if px is None or py is None:
        return False
    (cv, cu, scaled), (fv, fu, fine_scaled) = (px, py) if px[1] >= py[1] else (py, px)
    if not scaled and len(str(int(cv / cu))) < 2 and not (cu == fu and fine_scaled):
        return False
    return cv != 0 and math.floor(fv / cu + Fraction(1, 2)) == cv / cu


def _subject(text: str) -> str:
    first, _, rest = text.partition("\n")
    m = re.search(r"[^\W\d_]{2,}", first)
    if m is None:
        return ""
    w = m.group()
    pattern = r"(?<!\w)" + re.escape(w[0].upper()) + "(?i:" + re.escape(w[1:]) + r")(?!\w)"
    return normal_form(w) if re.search(pattern, rest) else ""


def _headline(text: str) -> list[str]:
    out: list[str] = []
    for w in re.findall(r"[^\W_]+", text.split("\n")[0].lower()):
        if w not in out:
            out.append(w)
    return out[:24]


def _stem(word: str) -> str:
    word = re.sub(r"^(.{3,}?)(ing|ed|s)$", r"\1", word)
    word = re.sub(r"^(.{3,})e$", r"\1", word)
    return word[:5]


def _stem_jaccard(a: list[str], b: list[str]) -> float:
    """Jaccard of the headlines' word stems (an -s, -ed or -ing ending and a final e cut,
    the first five letters)."""
    sa, sb = {_stem(w) for w in a}, {_stem(w) for w in b}
    return len(sa & sb) / len(sa | sb)


def novelty(doc: Document, other: Document, grams: set[str], other_grams: set[str]
            ) -> tuple[str, tuple[str, ...], tuple[str, ...]] | None:
    """The rule of docs/EVALUATION.md, straight from its wording."""
    mine, theirs = figures(doc.text), figures(other.text)
    only_new = tuple(f[0] for k, f in mine.items()
                     if not any(k == j or _same(f, g) for j, g in theirs.items()))
    only_old = tuple(g[0] for j, g in theirs.items()
                     if not any(k == j or _same(f, g) for k, f in mine.items()))
    shorter = min(len(grams), len(other_grams))
    if shorter and len(grams & other_grams) / shorter < 0.5:
        return "new_content", only_new, only_old
    correction = re.search(r"\b(corrected|corrects|correction)\b", doc.text.lower())
    s_new, s_old = _subject(doc.text), _subject(other.text)
    h_new, h_old = _headline(doc.text), _headline(other.text)
    if s_new and s_old and s_new not in normal_form(other.text) and not correction:
        return "subject", (s_new,), (s_old,)
    shared_grams = len(grams & other_grams)
    if (h_new and h_old and shared_grams / max(len(grams), len(other_grams)) < 0.5
            and _stem_jaccard(h_new, h_old) < 0.2 and not correction):
        return ("headline", tuple(w for w in h_new if w not in h_old),
                tuple(w for w in h_old if w not in h_new))
    changed = min(len(only_new), len(only_old))
    shared = len(mine) - len(only_new)
    if changed and not correction and changed / (changed + shared) > 1 / 5:
        return "figures", only_new, only_old
    # a new figure of more than a single digit: two digits, a separator or a scale word
    significant = any(power >= 0 or re.fullmatch(r"0*\d", raw) is None
                      for k, (raw, power) in mine.items()
                      if not any(k == j or _same((raw, power), g) for j, g in theirs.items()))
    if (significant and h_new and h_old and _stem_jaccard(h_new, h_old) < 1 / 3
            and not correction):
        return "development", only_new, only_old
    return None


def brute_force(
    docs: list[Document],
    q: int = 4,
    threshold: float = 0.8,
    window_hours: int = 24,
    case_sensitive: bool = False,
    index_duplicates: bool = True,
    novelty_mode: str = "off",
    follow_ups: frozenset[str] = frozenset(),
    keep: str = "first",
) -> list[RefDecision]:
    indexed: list[tuple[Document, int, str, set[str]]] = []
    watermark: dict[str, int] = {}
    seen: dict[tuple[str, str], RefDecision] = {}
    hour_of_seen: dict[tuple[str, str], int] = {}
    out: list[RefDecision] = []
    # (scope, identity) -> (story, hour, channel) of every item the window remembers
    members: dict[tuple[str, str], tuple[str, int, str]] = {}
    # (scope, story) -> (identity, q-grams, hour) of the version a reader keeps
    kept: dict[tuple[str, str], tuple[str, set[str], int]] = {}
    for doc in docs:
        hour = math.floor(doc.timestamp / 3600)
        key = (doc.scope, doc.identity)
        wm = max(watermark.get(doc.scope, hour), hour)
        watermark[doc.scope] = wm
        oldest = wm - window_hours
        if key in seen and hour_of_seen[key] >= oldest:
            out.append(seen[key])
            continue
        nf = normal_form(doc.text, case_sensitive)
        grams = qgram_set(nf, q)
        best: tuple[float, str, Document, set[str]] | None = None
        if hour >= oldest and nf:
            for other, other_hour, other_nf, other_grams in indexed:
                if other.scope != doc.scope or not (max(hour - window_hours, oldest)
                                                    <= other_hour <= hour):
                    continue
                if len(nf) < q or len(other_nf) < q:
                    sim = 1.0 if (len(nf) < q and other_nf == nf) else 0.0
                else:
                    sim = len(grams & other_grams) / max(len(grams), len(other_grams))
                if sim >= threshold and sim > (best[0] if best else -1.0):
                    best = (sim, other.identity, other, other_grams)
        applies = novelty_mode == "on" or (novelty_mode == "auto" and not doc.markup)
        verdict = None
        if best is not None and applies and len(nf) >= q:
            verdict = novelty(doc, best[2], grams, best[3])
        if best is None:
            decision = RefDecision(doc.identity, "unique", None, 0.0)
        elif verdict is not None:
            decision = RefDecision(doc.identity, "unique", None, best[0], verdict[0], best[1],
                                   verdict[1][:20], verdict[2][:20])
        else:
            exact = best[0] == 1.0
            decision = RefDecision(doc.identity, "exact_duplicate" if exact else "near_duplicate",
                                   best[1], best[0])
        late = hour < oldest
        joins = decision.duplicate_of
        if decision.novel is not None and decision.novel in follow_ups:
            joins = decision.resembles
        story = doc.identity
        if joins is not None:
            found = members.get((doc.scope, joins))
            story = found[0] if found is not None and found[1] >= oldest else joins
        if not late:
            members[key] = (story, hour, doc.channel)
        live = [c for (s, _), (st, h, c) in members.items()
                if s == doc.scope and st == story and h >= oldest]
        decision = replace(decision, story=story, story_size=1 if late else len(live),
                           story_channels=(doc.channel,) if late else tuple(sorted(set(live))))
        kept_too = decision.status == "unique" or index_duplicates  # indexed as it is
        if keep == "complete" and not late and len(nf) >= q and kept_too:
            if story == doc.identity:
                kept[(doc.scope, story)] = (doc.identity, grams, hour)
            elif decision.status == "near_duplicate":
                held = kept.get((doc.scope, story))
                # holds >= 9/10 of the kept version's q-grams, and >= 5/4 as many
                if (held is not None and held[2] >= oldest
                        and len(grams & held[1]) * 10 >= len(held[1]) * 9
                        and len(grams) * 100 >= len(held[1]) * 125):
                    decision = replace(decision, supersedes=held[0])
                    kept[(doc.scope, story)] = (doc.identity, grams, hour)
        out.append(decision)
        seen[key] = decision
        hour_of_seen[key] = hour
        if hour >= oldest and nf and (decision.status == "unique" or index_duplicates):
            indexed.append((doc, hour, nf, grams))
    return out
