"""Benchmarks of the ndd-stream core (``python -m bench.run``); see bench/README.md."""
