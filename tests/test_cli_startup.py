"""``ndd-stream dedup`` loads only what deciding a file needs: no Kafka or Faust clients,
no other subcommand's modules, no HTML parser for plain text, no terminal library for a
pipe, no asyncio (which pydantic-settings imports, unused). A regression here costs every
run of ``dedup`` its start-up time. The service's commands (worker, topics, ...) do not
load the demo, the web view or the evaluation: a worker's start would pay for them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ndd_stream import jsonio

NOT_LOADED = ("faust", "aiokafka", "confluent_kafka", "rocksdict", "rich", "resiliparse",
              "selectolax", "regex", "ndd_stream.cli.eval", "ndd_stream.eval",
              "ndd_stream.cli.demo", "ndd_stream.worker", "ndd_stream.kafka", "ndd_stream.view",
              "asyncio")

PROBE = """
import sys
from ndd_stream.cli.main import main
code = main(["dedup", sys.argv[1], "-o", sys.argv[2], "--scope", "global"])
loaded = sorted({name for name in sys.modules
                 for prefix in sys.argv[3].split(",") if name == prefix
                 or name.startswith(prefix + ".")})
print(code, ",".join(loaded))
"""


def test_dedup_of_plain_text_loads_no_client_parser_or_other_command(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    items.write_bytes(b"".join(jsonio.dumps_line(
        {"id": i, "channel": "wire", "timestamp": 1_700_000_000 + i,
         "text": f"STANDARD OIL <SRD> unit {i} said net rose to {i}.5 mln dlrs"})
        for i in range(20)))
    out = subprocess.run([sys.executable, "-c", PROBE, str(items), str(tmp_path / "out.jsonl"),
                          ",".join(NOT_LOADED)], capture_output=True, text=True, timeout=120,
                         check=True)
    code, _, loaded = out.stdout.strip().partition(" ")
    assert code == "0", out.stderr
    assert loaded == "", f"dedup loaded {loaded}"
    assert len((tmp_path / "out.jsonl").read_bytes().splitlines()) == 20


STAND_IN = """
import gc, sys
gc.disable()
import ndd_stream.cli
import pydantic_settings.main as ps
assert not gc.isenabled(), "importing the command line turned the collector on"
assert "asyncio" not in sys.modules
assert ps.asyncio.iscoroutinefunction is not None  # the stand-in imports asyncio when read
import asyncio
assert sys.modules["asyncio"] is asyncio and type(asyncio) is type(gc), asyncio
assert ps.asyncio.run is asyncio.run
print("ok")
"""


def test_asyncio_deferred_until_used_and_collector_state_kept() -> None:
    """pydantic-settings gets a stand-in for its unused asyncio that imports the real one
    when read (an async pydantic-settings ``CliApp`` still runs); ``sys.modules`` holds the
    real asyncio, and the command line leaves the collector as it found it."""
    out = subprocess.run([sys.executable, "-c", STAND_IN], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    on = subprocess.run([sys.executable, "-c", "import gc, ndd_stream.cli; print(gc.isenabled())"],
                        capture_output=True, text=True, timeout=120, check=True)
    assert on.stdout.strip() == "True", on.stderr


SERVICE_PROBE = """
import sys
from ndd_stream.cli.main import main
try:
    main([sys.argv[1], "--help"])
except SystemExit as exc:
    loaded = sorted({name for name in sys.modules for prefix in sys.argv[2].split(",")
                     if name == prefix or name.startswith(prefix + ".")})
    print(exc.code, ",".join(loaded))
"""
SERVICE_NOT_LOADED = ("rich", "ndd_stream.cli.eval", "ndd_stream.eval", "ndd_stream.cli.demo",
                      "ndd_stream.cli.web_view", "ndd_stream.view")


def test_the_service_commands_parse_without_the_demo_view_or_evaluation() -> None:
    for command in ("worker", "topics", "produce", "tail", "settings"):
        out = subprocess.run([sys.executable, "-c", SERVICE_PROBE, command,
                              ",".join(SERVICE_NOT_LOADED)], capture_output=True, text=True,
                             timeout=120, check=True)
        code, _, loaded = out.stdout.strip().rpartition("\n")[2].partition(" ")
        assert code == "0", out.stderr
        assert loaded == "", f"{command} loaded {loaded}"
        assert f"usage: ndd-stream {command}" in out.stdout
    # every subcommand is still there when none is named (ndd-stream --help)
    from ndd_stream.cli.main import make_parser

    assert {"dedup", "worker", "eval", "demo", "view"} <= set(make_parser()[1])
