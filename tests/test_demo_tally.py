"""The demo's bookkeeping without a broker: channels of dead letters, counters that add up."""

from __future__ import annotations

import re
from pathlib import Path

from ndd_stream.cli.demo.feed import FeedLine, load_feed
from ndd_stream.cli.demo.tally import NO_CHANNEL, Tally, outcome_of_decision, outcome_of_dlq
from ndd_stream.kafka.produce import prepare_line
from ndd_stream.settings import Settings
from ndd_stream.worker.records import Source, dlq_headers


def _line(number: int, channel: str | None) -> FeedLine:
    return FeedLine(number, b"{}", None, None, f"id{number}", channel, f"title {number}")


def _decision(position: str, status: str, channel: str = "wire") -> bytes:
    return (f'{{"status": "{status}", "channel": "{channel}", "identity": "x{position}", '
            f'"similarity": 0.5, "source": "{position}"}}').encode()


def test_a_dead_letter_produced_by_someone_else_keeps_its_channel() -> None:
    tally = Tally([])
    headers = dlq_headers("empty_text", "no text", Source("raw", 0, 7))
    tally.add(*outcome_of_dlq(headers, b'{"channel": "ansa", "title": "t"}', "channel"))
    tally.add(*outcome_of_dlq(dlq_headers("not_json", "", Source("raw", 0, 8)), b"{oops"))
    assert tally.counts() == {NO_CHANNEL: {"dlq": 1}, "ansa": {"dlq": 1}}


def test_a_dead_letter_of_the_feed_takes_the_lines_channel() -> None:
    tally = Tally([_line(1, "dpa")])
    tally.sent = 1
    tally.delivered_at(0, "raw[0]@0")
    tally.add(*outcome_of_dlq(dlq_headers("not_json", "", Source("raw", 0, 0)), b"{oops"))
    assert tally.counts() == {"dpa": {"dlq": 1}}


def test_progress_counters_add_up_to_what_they_show() -> None:
    lines = [_line(n, "wire") for n in range(1, 6)]
    tally = Tally(lines)
    tally.sent = 5
    for i in range(5):
        tally.delivered_at(i, f"raw[0]@{i}")
    for i, status in enumerate(["unique", "unique", "near_duplicate", "exact_duplicate"]):
        parsed = outcome_of_decision(_decision(f"raw[0]@{i}", status))
        assert parsed is not None
        tally.add(*parsed)
    tally.add(*outcome_of_dlq(dlq_headers("empty_text", "", Source("raw", 0, 4)), b"{}"))
    tally.add(*outcome_of_dlq(dlq_headers("empty_text", "", Source("raw", 1, 0)), b"{}"))
    parsed = outcome_of_decision(_decision("raw[1]@1", "unique"))
    assert parsed is not None
    tally.add(*parsed)  # two records from someone else's produce (--keep-running)
    text = tally.progress()
    shown = int(re.search(r"decided (\d+)", text).group(1))  # type: ignore[union-attr]
    parts = [int(n) for n in re.findall(r"[a-z_]+ (\d+)(?: \+|$)", text.split("=")[1])]
    assert shown == sum(parts) == 7, text
    assert "(feed 5 + others 2)" in text and text.startswith("sent 5/5")


def test_a_line_that_is_not_utf8_still_shows_its_channel(tmp_path: Path) -> None:
    latin1 = b'{"id": 7, "channel": "ansa-en", "title": "Citt\xe0", "text": "x"}'
    feed = tmp_path / "feed.jsonl"
    feed.write_bytes(latin1 + b"\n" + b'{"id": 8, "channel": "dpa", "text": "y"}\n')
    lines = load_feed(feed, Settings())
    assert [line.channel for line in lines] == ["ansa-en", "dpa"]
    assert lines[0].key == prepare_line(Settings(), latin1).key  # the key is not guessed
    tally = Tally([])
    tally.add(*outcome_of_dlq(dlq_headers("invalid_utf8", "", Source("raw", 0, 1)), latin1))
    assert tally.counts() == {"ansa-en": {"dlq": 1}}
