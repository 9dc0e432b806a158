"""Persistent state stores (RocksDB through rocksdict), outside the pure core."""
