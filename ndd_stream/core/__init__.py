"""The pure detection core: normal form, q-gram signatures, the windowed index, the detector.

Nothing in this package imports Kafka, Faust or RocksDB code, so it runs and is
tested without an event loop, a disk or a broker.
"""
