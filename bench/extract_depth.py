"""Worst-case extraction time of one hostile HTML item (docs/RELIABILITY.md, "Security").

Pathological pages (deep nesting, unclosed blocks, many elements, adoption-agency ``<a>``,
nested tables) up to the 2 MB item cap, through ``extract_text`` in ``main`` and ``tags``
mode, one call each (the worst of ``--repeat``), and the longest the GIL was held meanwhile
(what a worker's event loop waits at most behind a decision thread). The baseline is the
extraction as it was before the nesting limit (resiliparse's main-content extractor and
selectolax on the raw string), measured in the same run at the depths it survives
(``--baseline-depths``): it grows with the square of the depth, so 2 MB of nesting would
take hours.

    python -m bench.extract_depth                       # bench/results/extract_depth.md
    python -m bench.extract_depth --baseline-depths 2000 8000
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import string
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from resiliparse.extract.html2text import extract_plain_text
from selectolax.lexbor import LexborHTMLParser

from ndd_stream import jsonio
from ndd_stream.core.detector import DetectorConfig
from ndd_stream.core.extract import ExtractMode, extract_text, prose_blocks
from ndd_stream.core.items import ItemFormat
from ndd_stream.worker.deciding import OutputTopics, PartitionDecider
from ndd_stream.worker.records import Source

CAP = 2_000_000

PATTERNS: dict[str, Callable[[int], str]] = {
    "nested div": lambda n: "<div>" * n + "hello world " * 10 + "</div>" * n,
    "unclosed div": lambda n: "<div>x " * n,
    "100 deep, then wide": lambda n: "<div>" * 100 + "<span>x</span>" * n,
    "flat spans": lambda n: "<span>x</span>" * n,
    "unclosed a": lambda n: "<a>x " * n,
    "nested tables": lambda n: "<table><tr><td>x " * n,
}


def largest(pattern: Callable[[int], str], cap: int = CAP) -> str:
    """The pattern repeated as often as fits in ``cap`` characters."""
    lo, hi = 1, 2
    while len(pattern(hi)) <= cap:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if len(pattern(mid)) <= cap else (lo, mid)
    return pattern(lo)


def baseline(markup: str, mode: ExtractMode) -> str:
    """Extraction before the nesting limit (commit e8fa78f), for the same-run comparison."""
    if mode == "main":
        text = extract_plain_text(markup, main_content=True)
        return prose_blocks(text)
    tree = LexborHTMLParser(markup)
    root = tree.body or tree.root
    return (root.text(separator=" ") or "") if root is not None else ""


def worst(fn: Callable[[str, ExtractMode], object], markup: str, mode: ExtractMode,
          repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn(markup, mode)
        times.append(time.perf_counter() - started)
    return max(times)


def longest_hold(target: Callable[[], object]) -> float:
    """The longest the GIL was held while ``target`` ran in a thread: the longest a
    worker's event loop waits behind a decision (a 2 ms sleeper measures the gaps)."""
    worker = threading.Thread(target=target)
    last = time.perf_counter()
    worker.start()
    longest = 0.0
    while worker.is_alive():
        time.sleep(0.002)
        now = time.perf_counter()
        longest, last = max(longest, now - last), now
    return longest


def decisions(repeat: int) -> list[str]:
    """A worker's whole decision of each 2 MB item (parse, extraction, detection, state),
    as its decision thread runs it: seconds and the longest GIL hold."""
    rnd = random.Random(1)
    words = ["".join(rnd.choice(string.ascii_lowercase) for _ in range(rnd.randint(2, 9)))
             for _ in range(50_000)]
    prose = " ".join(rnd.choice(words) for _ in range(300_000))
    texts = {name: largest(pattern, CAP - 100) for name, pattern in PATTERNS.items()}
    texts["plain words"] = prose[: CAP - 100]
    texts["words in <p>"] = ("<p>" + prose)[: CAP - 100]
    lines = ["", "## After: a worker's whole decision of each 2 MB item", "",
             "| item | bytes | decision | longest GIL hold |", "|---|---:|---:|---:|"]
    with tempfile.TemporaryDirectory() as tmp:
        decider = PartitionDecider(0, Path(tmp) / "p0", DetectorConfig(threshold=0.3),
                                   ItemFormat(), OutputTopics("u", "d", "dlq", "dec", "cl"))
        try:
            offset = 0
            for name, text in texts.items():
                seconds, hold = 0.0, 0.0
                for _ in range(repeat):
                    offset += 1
                    raw = jsonio.dumps({"id": f"{name}-{offset}", "channel": "c",
                                        "text": text, "timestamp": 1_772_380_800})
                    source = Source("raw", 0, offset, None)
                    started = time.perf_counter()
                    hold = max(hold, longest_hold(
                        partial(decider.process, raw, None, [], source)))
                    seconds = max(seconds, time.perf_counter() - started)
                lines.append(f"| {name} | {len(raw):,} | {seconds:.3f} | {hold:.3f} |")
                print(lines[-1], flush=True)
        finally:
            decider.close()
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline-depths", type=int, nargs="*", default=[2000, 8000, 16000])
    parser.add_argument("--out", type=Path, default=Path("bench/results/extract_depth.md"))
    args = parser.parse_args()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [f"# Extraction of hostile HTML items ({platform.node()}, {os.cpu_count()} cores, "
             f"load average {load} at the start, {when})",
             "", "Same run; worst of each repeat, seconds per item (`python -m "
             "bench.extract_depth`). 'before': extraction without the nesting limit.", "",
             "## Nested div: before (no limit) and after, by depth", "",
             "| depth | bytes | before main | after main | before tags | after tags |",
             "|---:|---:|---:|---:|---:|---:|"]
    for depth in args.baseline_depths:
        markup = PATTERNS["nested div"](depth)
        row = [f"{depth:,}", f"{len(markup):,}"]
        modes: tuple[ExtractMode, ...] = ("main", "tags")
        for mode in modes:
            row.append(f"{worst(baseline, markup, mode, 1):.3f}")
            row.append(f"{worst(extract_text, markup, mode, args.repeat):.3f}")
        lines.append("| " + " | ".join(row) + " |")
        print(lines[-1], flush=True)
    lines += ["", f"## After: the largest item under the {CAP:,}-byte cap", "",
              "| pattern | bytes | main | tags | longest GIL hold (main) |",
              "|---|---:|---:|---:|---:|"]
    for name, pattern in PATTERNS.items():
        markup = largest(pattern)
        main_s = worst(extract_text, markup, "main", args.repeat)
        tags_s = worst(extract_text, markup, "tags", args.repeat)
        hold = max(longest_hold(partial(extract_text, markup, "main"))
                   for _ in range(args.repeat))
        lines.append(f"| {name} | {len(markup):,} | {main_s:.3f} | {tags_s:.3f} | "
                     f"{hold:.3f} |")
        print(lines[-1], flush=True)
    lines += decisions(args.repeat)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
