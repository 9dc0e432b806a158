"""The test harness: one place for what tests need around a real broker and worker.

- ``harness.kafka``: unique names, the settings factory, topics, producing, and one
  bounded reader (``Reader.wait`` is the only poll loop; ``wait_until`` the only wait on
  a condition);
- ``harness.worker``: worker (and other) subprocesses, their logs and metrics, and what
  ``ndd-stream dedup`` decides for the same input;
- ``harness.scenarios``: the reliability scenarios (kill -9, join/leave), also run at
  any size by ``bench/crash_loop.py``;
- ``harness.fakes``: an in-memory broker for the decider pool's unit tests.

``tests/`` and the repository root are on ``sys.path`` through pytest's ``pythonpath``
setting (pyproject.toml), so tests import ``harness`` and ``bench`` directly.
"""
