"""ndd-stream: a streaming near-duplicate filter for news (DDD over a sliding window)."""

__version__ = "0.1.0"
ENGINE_VERSION = "ddd-1"
"""Goes into every decision header; bump when decisions could change for the same input."""
