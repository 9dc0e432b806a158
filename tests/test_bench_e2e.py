"""bench.e2e's own arithmetic (the runs themselves need a broker and minutes: not a test)."""

from __future__ import annotations

from bench.e2e import measured_cpu, stalled_seconds


def test_stalled_seconds_count_the_timeline_without_new_outputs_mid_run() -> None:
    # (seconds since start, outputs so far, CPU columns): nothing before the first output
    # counts (start-up), nor the tail past 97% (the last stragglers)
    timeline = [(0.0, 0, []), (1.0, 0, []), (2.0, 5, []), (3.0, 5, []), (4.2, 5, []),
                (5.0, 90, []), (6.0, 90, []), (7.0, 98, []), (8.0, 98, []), (9.0, 100, [])]
    assert stalled_seconds(timeline, 100) == 3.2
    assert stalled_seconds(timeline[:2], 100) == 0.0


def test_measured_cpu_is_per_process_from_the_warmup_line_to_the_end() -> None:
    # CPU seconds so far of two workers and the broker; warm-up ends at the 2.0 s line
    timeline = [(0.0, 0, [1.0, 1.0, 0.5]), (1.0, 50, [1.5, 1.2, 0.6]),
                (2.0, 100, [2.0, 1.4, 0.7]), (6.0, 500, [6.0, 3.4, 1.1])]
    got = measured_cpu(timeline, 100)
    assert got == {"cores": [1.0, 0.5, 0.1], "ms_per_item": [10.0, 5.0, 1.0]}
    assert measured_cpu(timeline, 600) == {"cores": [], "ms_per_item": []}
