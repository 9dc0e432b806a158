"""Quality evaluation of ndd-stream and of the methods it grew from, on labelled corpora.

``ndd-stream eval CORPUS`` loads a corpus of labelled near-duplicate clusters, extracts text,
scores every pair with every method once, sweeps thresholds afterwards, replays the corpus as
a stream, and writes a JSON report, a Markdown table and an F1-vs-threshold plot.
"""
