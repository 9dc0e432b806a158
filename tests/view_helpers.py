"""What the web view's tests add to the harness: waiting for a line a process printed, and
a headless chromium (Debian's, through selenium) with bounded waits."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from harness.kafka import wait_until
from harness.worker import Process

from ndd_stream.core.items import ItemFormat
from ndd_stream.kafka.tail import TailRecord
from ndd_stream.view.model import Limits, ViewState

T0 = 1_700_000_000.0
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
WAIT_S = 90  # generous: the machine is shared; every wait ends as soon as its condition holds

#: Run before any script of every page (Chrome DevTools; not subject to the page's CSP):
#: records each Content-Security-Policy violation, so a test can assert there was none.
CSP_WATCH = ("window.__cspViolations = [];"
             "document.addEventListener('securitypolicyviolation', function (e) {"
             "  window.__cspViolations.push(e.violatedDirective + ' ' + e.blockedURI); });")


def printed(process: Process, pattern: str, timeout: float) -> re.Match[str]:
    """The first match of ``pattern`` (multiline) in what ``process`` printed to its log,
    waited for at most ``timeout`` s; fails early if the process ended without it."""
    found: list[re.Match[str]] = []

    def seen() -> bool:
        match = re.search(pattern, process.log_text(), re.MULTILINE)
        if match is not None:
            found.append(match)
        return match is not None or not process.alive()

    wait_until(seen, timeout)
    assert found, f"no {pattern!r} within {timeout:g} s:\n{process.log_tail()}"
    return found[0]


def browser() -> Any:
    """Headless chromium; skips (fails under NDD_CI=1, see conftest) when it is missing."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("chromium not installed (apt-get install chromium chromium-driver)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("chromium not installed: selenium missing (pip install -e '.[test]')")
    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": CSP_WATCH})
    return driver


def chromium() -> Iterator[Any]:
    """A browser for a test's ``driver`` fixture (``yield from chromium()``), closed after."""
    d = browser()
    try:
        yield d
    finally:
        d.quit()


def wait(driver: Any, condition: Any, message: str, timeout: float = WAIT_S) -> Any:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.25, ignored_exceptions=(
        StaleElementReferenceException, NoSuchElementException)).until(condition, message)


def text_of(driver: Any, css: str) -> str:
    return str(driver.find_element("css selector", css).text)


def severe(driver: Any) -> list[Any]:
    """The browser console's errors since the last call (a CSP violation is one)."""
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def csp_violations(driver: Any) -> list[str]:
    """CSP violations the current page reported (CSP_WATCH)."""
    return list(driver.execute_script("return window.__cspViolations || []"))


#: What a page's title becomes, and the window flag set, if any payload ran.
PWNED_TITLE = "PWNED"
#: Hostile values for every field: markup, attribute breakers (both quotes), a javascript:
#: URL, closing tags of raw-text elements, bidi overrides and isolates, control characters,
#: format placeholders. Each would set ``window.__pwned`` and the title if it ran.
HOSTILE = (
    "x<img src=x onerror=\"document.title='PWNED-'+document.domain;window.__pwned=1\">",
    "\"><svg onload=\"window.__pwned=2;document.title='PWNED'\"><img src=x onerror=\"1\">",
    "'><img src=x onerror='window.__pwned=3;document.title=\"PWNED\"'>",
    "javascript:window.__pwned=4//<a href=\"javascript:window.__pwned=4\">x</a> onerror=",
    "</title></textarea></pre></script><script>window.__pwned=5;document.title='PWNED'"
    "</script><img src=x onerror=window.__pwned=5>",
    "\u202egnp.exe\u2066\x1b[31m\x07\x00\u2069 <img src=x onerror=window.__pwned=6>",
    "{0} {} {x} %s <iframe srcdoc=\"<script>parent.__pwned=7</script>\"></iframe> onerror=",
    "<details open ontoggle=window.__pwned=8><summary>x</summary></details> onerror=",
)


def record(topic: str, offset: int, value: object, headers: dict[str, str] | None = None
           ) -> TailRecord:
    """A record as the view's follower hands it over (JSON value unless bytes)."""
    raw = value if isinstance(value, bytes) else orjson.dumps(value)
    return TailRecord(topic, 0, offset, int(T0 * 1000), None, raw,
                      tuple((k, v.encode("utf-8", "surrogatepass")) for k, v in
                            (headers or {}).items()))


def hostile_state(bad: str, limits: Limits | None = None, state: ViewState | None = None
                  ) -> ViewState:
    """A state (new, or ``state`` added to) whose every field is ``bad``: routed texts,
    decisions (one whose matched item is not held), a novelty explanation, headers, a dead
    letter."""
    state = state or ViewState(ItemFormat(), limits or Limits())
    item = {"id": bad, "channel": bad, "title": bad, "text": bad + " shared words here ok",
            "timestamp": bad}
    state.ingest("unique", record("news.unique", 0, item, {"ndd-identity": bad,
                                                         "ndd-status": "unique", bad: bad}))
    copy = {**item, "id": bad + "2"}
    state.ingest("duplicate", record("news.duplicate", 0, copy, {"ndd-identity": bad + "2"}))
    common = {"similarity": 0.9, "matched_channel": bad, "scope": bad, "channel": bad,
              "time": bad, "policy": bad, "replayed": True, "story": bad, "supersedes": bad,
              bad: bad}
    state.ingest("decisions", record("news.decisions", 0, {
        **common, "identity": bad + "2", "status": "near_duplicate", "duplicate_of": bad,
        "source": bad}, {bad: bad}))
    state.ingest("decisions", record("news.decisions", 1, {
        **common, "identity": bad + "3", "status": bad, "duplicate_of": bad + "gone",
        "source": bad + "@1"}))
    state.ingest("decisions", record("news.decisions", 2, {
        **common, "identity": bad + "2", "status": "unique", "duplicate_of": None,
        "source": bad + "@2", "novel": {"reason": bad, "resembles": bad, "detail": bad,
                                        "only_new": [bad], "only_old": [bad]}},
        {"ndd-novel-detail": bad}))
    state.ingest("dlq", record("news.dlq", 0, bad.encode("utf-8", "surrogatepass"), {
        "ndd-dlq-reason": bad, "ndd-dlq-detail": bad, "ndd-source-topic": bad,
        "ndd-source-partition": bad, "ndd-source-offset": bad, "ndd-dlq-truncated": bad}))
    state.lag_error = bad
    state.follow_error = bad
    return state
