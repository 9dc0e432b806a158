"""``ndd-stream view``: a live web page of the decisions (Now, Recent decisions, a pair side
by side, DLQ), read from the output, audit and dead-letter topics. See docs/VIEW.md."""
