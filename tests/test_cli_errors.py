"""User errors of ``ndd-stream``: one clear line and exit code 2, never a traceback; an
unreachable broker: one line naming the address, exit code 3, no state directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ndd_stream.cli.main import build_settings, main, make_parser
from ndd_stream.kafka.broker import free_port
from ndd_stream.settings import Settings


def _fails(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    """Run the CLI, expect exit code 2; the stderr lines."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    assert code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()


@pytest.fixture(autouse=True)
def _no_ndd_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in Settings.model_fields:
        monkeypatch.delenv("NDD_" + name.upper(), raising=False)


def test_missing_and_unreadable_input_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.jsonl"
    assert _fails(["dedup", str(missing)], capsys) == [
        f"ndd-stream dedup: error: {missing}: No such file or directory"]
    assert _fails(["dedup", str(tmp_path)], capsys) == [
        f"ndd-stream dedup: error: {tmp_path}: Is a directory"]
    good = tmp_path / "in.jsonl"
    good.write_text('{"id": 1, "title": "a title", "channel": "c"}\n', encoding="utf-8")
    out = tmp_path / "no" / "such" / "dir.jsonl"
    assert _fails(["dedup", str(good), "-o", str(out)], capsys) == [
        f"ndd-stream dedup: error: {out}: No such file or directory"]


def test_a_bad_setting_names_the_variable_the_range_and_the_subcommand_usage(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NDD_THRESHOLD", "2")
    lines = _fails(["dedup", "x.jsonl"], capsys)
    assert lines[0].startswith("usage: ndd-stream dedup ")
    assert lines[-1] == ("ndd-stream dedup: error: invalid settings: NDD_THRESHOLD=2: "
                         "allowed (0.0, 1.0]")
    assert not any("pydantic" in line for line in lines)


def test_a_bad_option_names_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    lines = _fails(["dedup", "x.jsonl", "--threshold", "5", "--q", "0"], capsys)
    assert lines[-1] == ("ndd-stream dedup: error: invalid settings: --threshold 5.0: allowed "
                         "(0.0, 1.0]; --q 0: allowed [1, 16]")


def test_cross_checks_and_non_json_values(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NDD_SECURITY_PROTOCOL", "SASL_SSL")
    assert _fails(["tail"], capsys)[-1] == (
        "ndd-stream tail: error: invalid settings: NDD_SECURITY_PROTOCOL=SASL_SSL needs "
        "NDD_SASL_USERNAME and NDD_SASL_PASSWORD")
    monkeypatch.delenv("NDD_SECURITY_PROTOCOL")
    monkeypatch.setenv("NDD_SCOPE_MAP", "not json")
    assert _fails(["tail"], capsys)[-1].startswith(
        "ndd-stream tail: error: invalid settings: NDD_SCOPE_MAP: not valid JSON")


def test_config_is_accepted_after_the_subcommand_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "ndd.env"
    config.write_text("NDD_THRESHOLD=0.9\n", encoding="utf-8")
    parser, _ = make_parser()
    for argv in (["--config", str(config), "dedup", "x"], ["dedup", "x", "--config", str(config)],
                 ["dedup", "--config", str(config), "x"]):
        assert build_settings(parser.parse_args(argv)).threshold == 0.9, argv
    assert build_settings(parser.parse_args(["dedup", "x"])).threshold != 0.9
    config.write_text("NDD_Q=99\n", encoding="utf-8")
    assert _fails(["dedup", "x", "--config", str(config)], capsys)[-1] == (
        f"ndd-stream dedup: error: invalid settings: NDD_Q=99 (in {config}): allowed [1, 16]")
    assert _fails(["dedup", "x", "--config", str(tmp_path / "none")], capsys) == [
        f"ndd-stream dedup: error: --config {tmp_path / 'none'}: No such file or directory"]


# Unreadable, unwritable and binary files, and directories. The tests may run as root, for
# whom chmod 000 reads fine: /proc/self/mem fails every read with EIO (after a successful
# open, so the OSError names no file), /dev/full every write with ENOSPC.
MEM = "/proc/self/mem"


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    good = tmp_path / "in.jsonl"
    good.write_text('{"id": 1, "text": "a story", "timestamp": 1}\n'
                    '{"id": 2, "text": "another story", "timestamp": 2}\n', encoding="utf-8")
    binary = tmp_path / "binary.dat"
    binary.write_bytes(b"\x00\xff\xfe\x00 not text")
    return {"good": str(good), "binary": str(binary), "dir": str(tmp_path)}


@pytest.mark.parametrize(("argv", "want"), [
    (["dedup", MEM], "ndd-stream dedup: error: /proc/self/mem: Input/output error"),
    (["dedup", "{good}", "-o", "/dev/full"],
     "ndd-stream dedup: error: /dev/full: No space left on device"),
    (["dedup", "{good}", "-o", "{dir}"], "ndd-stream dedup: error: {dir}: Is a directory"),
    (["--config", MEM, "dedup", "{good}"],
     "ndd-stream dedup: error: --config /proc/self/mem: Input/output error"),
    (["--config", "{dir}", "dedup", "{good}"],
     "ndd-stream dedup: error: --config {dir}: Is a directory"),
    (["--config", "{binary}", "dedup", "{good}"],
     "ndd-stream dedup: error: --config {binary}: not a UTF-8 text file (byte 0xff at offset 1)"),
    (["eval", MEM], "ndd-stream eval: error: /proc/self/mem: Input/output error"),
    (["eval", "{good}", "--pairs", MEM],
     "ndd-stream eval: error: /proc/self/mem: Input/output error"),
    (["eval", "{good}", "--pairs", "{dir}"], "ndd-stream eval: error: {dir}: Is a directory"),
    (["eval", "{good}", "--pairs", "{binary}"],
     "ndd-stream eval: error: {binary}: not a UTF-8 text file (byte 0xff at offset 1)"),
    (["eval", "{good}", "-o", "/dev/full"],
     "ndd-stream eval: error: -o /dev/full: not a directory"),
    (["produce", MEM], "error: /proc/self/mem: Input/output error"),
    (["produce", "{dir}"], "error: {dir}: Is a directory"),
    (["demo", "--plain", "--feed", MEM], "error: --feed /proc/self/mem: Input/output error"),
    (["demo", "--plain", "--feed", "{dir}"], "error: --feed {dir}: Is a directory"),
])
def test_file_errors_are_one_line_naming_the_file(
    argv: list[str], want: str, files: dict[str, str], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [a.format(**files) for a in argv]
    if argv[0] == "demo":
        argv += ["--data-dir", str(tmp_path / "runs")]
    assert _fails(argv, capsys) == [want.format(**files)]
    assert not (tmp_path / "runs").exists()  # a failed demo --feed leaves no run directory
    assert capsys.readouterr().out == ""  # errors go to stderr


def test_worker_help_shows_defaults_as_typed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "102")
    with pytest.raises(SystemExit):
        main(["worker", "--help"])
    text = capsys.readouterr().out
    assert "PosixPath" not in text and "[" not in text.split("settings: ")[1]
    assert "(default: ~/.local/share/ndd-stream;" in text
    assert "(default: text,body,content;" in text
    assert max(map(len, text.splitlines())) <= 100  # wrapped to the terminal (COLUMNS)


def test_worker_without_a_broker_says_so_in_one_line_and_creates_no_state(
    tmp_path: Path,
) -> None:
    address = f"127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NDD_")}
    env.update({"NDD_BROKERS": address, "NDD_BROKER_TIMEOUT_S": "1", "NDD_WEB_PORT": "0",
                "HOME": str(tmp_path / "home")})  # the default NDD_DATA_DIR lives under it
    env.pop("XDG_DATA_HOME", None)
    run = subprocess.run([sys.executable, "-m", "ndd_stream.cli", "worker"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 3, run.stderr
    lines = (run.stdout + run.stderr).strip().splitlines()
    assert len(lines) <= 2, lines
    assert f"no Kafka broker answers at {address} (NDD_BROKERS)" in lines[-1]
    assert "exit code 3" in lines[-1]
    assert list(tmp_path.iterdir()) == []  # no state directory before there is state


@pytest.mark.parametrize(("variable", "value", "allowed"), [
    ("NDD_COUNT_THREADS", "two", "NDD_COUNT_THREADS=two"),
    ("NDD_COUNT_THREADS", "0", "NDD_COUNT_THREADS=0: allowed >= 1"),
    ("NDD_DENSE_FRACTION", "2", "NDD_DENSE_FRACTION=2: allowed [0.0, 1.0]"),
    ("NDD_NO_KERNELS", "perhaps", "NDD_NO_KERNELS=perhaps"),
])
def test_the_cores_speed_knobs_are_settings_with_one_line_errors(
    variable: str, value: str, allowed: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Count threads, dense fraction and the numpy switch were read (and a bad value made
    the process exit) inside core at import; now they are validated like any setting."""
    monkeypatch.setenv(variable, value)
    lines = _fails(["dedup", "x.jsonl"], capsys)
    assert lines[-1].startswith("ndd-stream dedup: error: invalid settings: " + allowed)


def test_no_kernels_makes_the_cli_run_the_numpy_core(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    from ndd_stream.core import kernels

    monkeypatch.setattr(kernels, "IMPLEMENTATION", kernels.IMPLEMENTATION)
    monkeypatch.setattr(kernels, "_C", kernels._C)
    items = tmp_path / "in.jsonl"
    item = '"text": "a short news item about rates", "channel": "c", "timestamp": 1000}'
    items.write_text(f'{{"id": 1, {item}\n{{"id": 2, {item}\n', encoding="utf-8")
    out = tmp_path / "out.jsonl"
    monkeypatch.setenv("NDD_NO_KERNELS", "1")
    assert main(["dedup", str(items), "-o", str(out)]) == 0
    assert kernels.IMPLEMENTATION == "numpy" and kernels._C is None
    assert '"exact_duplicate"' in out.read_text(encoding="utf-8").splitlines()[1]
