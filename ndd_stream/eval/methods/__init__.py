"""Near-duplicate methods compared by ``ndd-stream eval`` (DDD and the seeds' baselines)."""
