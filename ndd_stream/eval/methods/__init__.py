"""Near-duplicate methods compared by ``ndd-stream eval`` (DDD and baseline methods)."""
