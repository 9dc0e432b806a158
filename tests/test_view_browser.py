"""The web view in a real headless browser (Debian's chromium through selenium), fed by a
real worker on the embedded broker: decisions appear, a pair shows its shared passages,
and the page keeps up while items stream in. Waits are bounded (WebDriverWait)."""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.kafka import Outgoing, SettingsFactory, produce
from harness.worker import Process, WorkerProcess
from newsgen import items as news_items
from view_helpers import chromium, csp_violations, printed, severe, text_of, wait

from ndd_stream.kafka.topics import apply, load_for
from ndd_stream.settings import Settings
from ndd_stream.view.server import ViewServer

pytestmark = [pytest.mark.broker, pytest.mark.timeout(300)]

BASE = ("SELLIS, March 12 - An earthquake of magnitude 5.1 struck the Lake Orvine region "
        "early on Tuesday, shaking buildings in several towns along the shore, but there were "
        "no immediate reports of casualties, the geological institute said. The quake hit at "
        "04:12 local time at a depth of about 10 kilometres, with its epicentre 6 kilometres "
        "north of the town of Sellis. Firefighters checked older buildings in the historic "
        "centre, where chimneys and roof tiles fell into the streets.")
REVISED = BASE.replace("magnitude 5.1", "magnitude 4.9")
SHARED = "shaking buildings in several towns along the shore"
PAIR_TITLE = "Lake Orvine quake revised"  # a sample-feed update with new figures
NOVEL_TITLE = "Bank of Norland provides 275"  # unique: other figures than what it resembles


def _item(identity: str, title: str, text: str, ts: str, channel: str = "wire") -> Outgoing:
    body = {"id": identity, "channel": channel, "title": title, "text": text, "timestamp": ts}
    return Outgoing(value=json.dumps(body).encode(), key=channel.encode())


@pytest.fixture
def driver() -> Iterator[Any]:
    yield from chromium()


@pytest.fixture
def pipeline(make_settings: SettingsFactory, tmp_path: Path) -> Iterator[tuple[Settings,
                                                                              ViewServer]]:
    settings = make_settings(partitions=2)
    report = apply(settings, load_for(settings), timeout=20)
    assert not report.errors and not report.mismatches, report
    worker = WorkerProcess(settings, tmp_path / "worker.log").start()
    view = ViewServer(settings, port=0, from_beginning=True, lag_interval=1.0)
    view.start()
    try:
        yield settings, view
    finally:
        view.stop()
        code = worker.stop()
        assert code == 0, worker.log_tail()


def test_decisions_appear_pairs_highlight_and_the_page_keeps_up(pipeline: tuple[
        Settings, ViewServer], driver: Any) -> None:
    settings, view = pipeline
    raw = settings.raw_topics[0]
    first = [_item("quake-1", "Magnitude 5.1 quake shakes Lake Orvine", BASE,
                   "2026-03-12T04:48:00Z"),
             _item("quake-2", "Lake Orvine quake revised to magnitude 4.9", REVISED,
                   "2026-03-12T05:54:00Z"),
             Outgoing(value=b"{this is not json", key=b"wire")]
    produce(settings.bootstrap_servers(), raw, first)

    # 1. Decisions from the worker appear on the live list without reloading the page.
    driver.get(view.url + "decisions")
    wait(driver, lambda d: "Lake Orvine quake revised" in text_of(d, "#decisions"),
         "the near duplicate never appeared on the decisions page")
    row = driver.find_element("css selector", 'tr.row[data-key$="@1"]')
    assert "near duplicate" in row.text and "Magnitude 5.1 quake shakes" in row.text

    # 2. The pair: both texts, the shared passage marked on each side, the figures marked.
    row.find_element("css selector", "a.title").click()
    wait(driver, lambda d: d.find_elements("css selector", "#old mark.shared"),
         "no shared passage marked on the matched side")
    for side in ("#new", "#old"):
        shared = " ".join(m.text for m in driver.find_elements("css selector",
                                                               f"{side} mark.shared"))
        assert SHARED in shared, (side, shared)
    assert [m.text for m in driver.find_elements("css selector", "#new mark.diff")] == ["4.9"] * 2
    assert [m.text for m in driver.find_elements("css selector", "#old mark.diff")] == ["5.1"] * 2
    assert "quake-1" in text_of(driver, "#headers") and '"duplicate_of": "quake-1"' in \
        text_of(driver, "#audit")

    # 2b. The decision opens its story: the first report and its copy, each with its role;
    #     the Stories page lists it, live, and opens it too.
    driver.find_element("css selector", "#story-link").click()
    wait(driver, lambda d: d.find_elements("css selector", "#members tr.row"),
         "the story page shows no member")
    roles = [r.find_element("css selector", "td.role").text
             for r in driver.find_elements("css selector", "#members tr.row")]
    assert roles == ["first report", "copy"], roles
    assert "Magnitude 5.1 quake shakes Lake Orvine" in text_of(driver, "h1")
    driver.get(view.url + "stories")
    wait(driver, lambda d: d.find_elements("css selector", '#stories tr.story[data-key="quake-1"]'),
         "the story never appeared on the Stories page")
    listed = driver.find_element("css selector", '#stories tr.story[data-key="quake-1"]')
    assert listed.find_element("css selector", "td.size").text == "2"
    listed.find_element("css selector", "a.title").click()
    wait(driver, lambda d: "story quake-1" in text_of(d, "#story-meta"), "the story did not open")
    _shot(driver, "story")

    # 3. The DLQ page names the rejected item's reason.
    driver.get(view.url + "dlq")
    wait(driver, lambda d: "not_json" in text_of(d, "#dlq"), "the dead letter never appeared")

    # 4. The Now page keeps working while items stream in: counts and rows follow.
    driver.get(view.url + "?span=5m")
    wait(driver, lambda d: int(text_of(d, "#count-total")) >= 3, "first decisions not counted")
    stream = [Outgoing(value=json.dumps(it).encode(), key=it["channel"].encode())
              for it in news_items(120, seed=13)]
    producer = threading.Thread(target=produce, args=(settings.bootstrap_servers(), raw, stream),
                                kwargs={"extra_config": {"linger.ms": 5}})
    before = int(driver.find_element("css selector", "body").get_attribute(
        "data-refreshed") or 0)
    producer.start()
    try:
        seen: set[int] = set()

        def follows(d: Any) -> bool:
            seen.add(int(text_of(d, "#count-total")))
            return max(seen) >= 3 + len(stream)

        wait(driver, follows, "the Now page did not count every streamed item")
    finally:
        producer.join(60)
    assert len(seen) >= 2, "the count never changed while the page was open"
    refreshed = int(driver.find_element("css selector", "body").get_attribute("data-refreshed"))
    assert refreshed > before
    assert "lost" not in driver.find_element("css selector", "#live-status").get_attribute(
        "class")

    # 5. Lag per partition: every raw record was forwarded, every scoped one decided; the
    #    high watermarks are exact although the router batches (Tansu's ListOffsets).
    total = len(first) + len(stream)

    def lag_settled(d: Any) -> bool:
        rows = [r.text.split() for r in d.find_elements("css selector", "#lag tr")[1:]]
        router = [r for r in rows if r[0] == "router"]
        decider = [r for r in rows if r[0] == "decider"]
        return (sum(int(r[4]) for r in router) == total
                and sum(int(r[4]) for r in decider) == total - 1  # not_json stops at the router
                and all(r[5] == "0" for r in rows))

    wait(driver, lag_settled, "lag table never showed every record forwarded and decided")
    assert text_of(driver, "#share-dlq").endswith("%")
    assert not severe(driver), severe(driver)  # a CSP violation is logged as an error too
    assert not csp_violations(driver)


def _shot(driver: Any, name: str) -> None:
    """With NDD_VIEW_SCREENSHOTS=DIR (tools/view_screenshots.py), save the page as a PNG."""
    folder = os.environ.get("NDD_VIEW_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        if name == "now":  # the whole page, down to the lag table
            height = int(driver.execute_script("return document.documentElement.scrollHeight"))
            driver.set_window_size(1400, min(max(height + 10, 700), 2000))
        driver.save_screenshot(str(Path(folder) / f"view-{name}.png"))
        driver.set_window_size(1400, 1000)


def test_demo_prints_the_view_and_keeps_serving_it(driver: Any, tmp_path: Path) -> None:
    """The README's promise: ``ndd-stream demo`` prints a URL that shows live decisions and
    a side-by-side pair, and ``--keep-running`` keeps it up until Ctrl-C."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NDD_")}
    env.update(PYTHONUNBUFFERED="1", COLUMNS="160")
    rate = os.environ.get("NDD_VIEW_SCREENSHOTS_RATE", "0")
    demo = Process([sys.executable, "-m", "ndd_stream.cli", "demo", "--plain", "--keep-running",
                    "--rate", rate, "--timeout", "240"], tmp_path / "demo.log", env=env,
                   cwd=tmp_path).start()
    try:
        url = printed(demo, r"^view\s+(http://127\.0\.0\.1:\d+/)", 120).group(1)
        printed(demo, r"still running", 240)

        driver.get(url + "?span=5m")
        wait(driver, lambda d: int(text_of(d, "#count-total")) >= 150,
             "the Now page does not count the feed")
        wait(driver, lambda d: int(d.find_element("css selector", "body").get_attribute(
            "data-refreshed") or 0) >= 2 and "probed at" in text_of(d, "#now"),
             "the Now page did not refresh")
        _shot(driver, "now")

        driver.get(url + "decisions?status=duplicate")
        wait(driver, lambda d: PAIR_TITLE in text_of(d, "#decisions"), "no duplicate listed")
        _shot(driver, "decisions")
        # the update with new figures, not its exact re-send (no figure differs there)
        driver.find_element("xpath", f'//tr[contains(., "{PAIR_TITLE}") and contains(., '
                            '"Magnitude 5.1")]//a[@class="title"]').click()
        wait(driver, lambda d: d.find_elements("css selector", "#old mark.shared"),
             "the pair shows no shared passage")
        assert driver.find_elements("css selector", "#new mark.diff")
        _shot(driver, "pair")

        # A unique item that resembled another (the novelty rule, CONTRACT): the figures the
        # decision found differing are marked in both texts.
        driver.get(url + "decisions?reason=figures")
        wait(driver, lambda d: NOVEL_TITLE in text_of(d, "#decisions"), "no 'figures' decision")
        driver.find_element("xpath", f'//a[contains(., "{NOVEL_TITLE}")]').click()
        wait(driver, lambda d: d.find_elements("css selector", "#old mark.shared"),
             "the novel pair shows no shared passage")
        assert "figures differ: 420 -> 275" in text_of(driver, "#novel")
        assert "from the decision" in text_of(driver, ".legend")
        new_marks = {m.text for m in driver.find_elements("css selector", "#new mark.diff")}
        old_marks = {m.text for m in driver.find_elements("css selector", "#old mark.diff")}
        assert {"275", "190"} <= new_marks and {"420", "310"} <= old_marks
        _shot(driver, "novel")

        driver.get(url + "dlq")
        wait(driver, lambda d: "bad_timestamp" in text_of(d, "#dlq"), "the DLQ page is empty")
        _shot(driver, "dlq")
        assert not severe(driver), severe(driver)  # a CSP violation is logged as an error too
        assert not csp_violations(driver)
    finally:
        code = demo.stop(60)  # SIGTERM: the demo stops worker and broker, like Ctrl-C
    assert code == 0, demo.log_tail()
