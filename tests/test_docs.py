"""The docs stay a reference that matches the code: the settings reference is generated and
current, every command the README shows exists, every relative link resolves, and no
user-facing text speaks of the project's own process."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from ndd_stream.cli.main import main, make_parser
from ndd_stream.settings import SETTING_GROUPS, Settings
from ndd_stream.settings_doc import markdown

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
USER_DOCS = [README, *DOCS, *sorted((ROOT / "docs").glob("*/README.md"))]
#: The project's process, which a reader of the reference has no use for.
PROCESS_WORDS = re.compile(r"\bissue \d+|\bround \d+|\bblocked\b|\.\./shared/data", re.I)
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = make_parser()[0]
    for action in parser._actions:  # argparse keeps the subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no subcommands")


def test_every_setting_is_in_exactly_one_group() -> None:
    grouped = [name for _, names in SETTING_GROUPS for name in names]
    assert sorted(grouped) == sorted(Settings.model_fields), "a field in no or two groups"
    assert len(grouped) == len(set(grouped))


def test_configuration_reference_is_generated_and_current() -> None:
    text = (ROOT / "docs" / "CONFIGURATION.md").read_text(encoding="utf-8")
    assert text == markdown(), (
        "docs/CONFIGURATION.md is stale: ndd-stream settings --markdown > docs/CONFIGURATION.md")
    for name in Settings.model_fields:
        assert f"`NDD_{name.upper()}`" in text, name


def test_settings_markdown_command_prints_the_reference(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in Settings.model_fields:
        monkeypatch.delenv("NDD_" + name.upper(), raising=False)
    assert main(["settings", "--markdown"]) == 0
    assert capsys.readouterr().out == markdown()
    monkeypatch.setenv("NDD_SASL_USERNAME", "u")
    monkeypatch.setenv("NDD_SASL_PASSWORD", "hunter2")
    monkeypatch.setenv("NDD_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    assert main(["settings", "--threshold", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "NDD_THRESHOLD=0.5\n" in out and "NDD_SASL_PASSWORD=**********\n" in out
    assert "hunter2" not in out


def _readme_commands() -> set[str]:
    text = README.read_text(encoding="utf-8")
    inline = re.findall(r"`([^`\n]+)`", FENCE.sub("", text))
    blocks = "\n".join(FENCE.findall(text)) + "\n" + "\n".join(inline)
    return set(re.findall(r"\bndd-stream ([a-z][a-z-]*)", blocks))


def test_every_command_the_readme_shows_answers_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    shown = _readme_commands()
    assert {"demo", "worker", "topics", "tail", "settings"} <= shown
    known = _subcommands()
    for command in sorted(shown):
        assert command in known, f"README shows `ndd-stream {command}`, which does not exist"
        with pytest.raises(SystemExit) as exit_:
            main([command, "--help"])
        assert exit_.value.code == 0, command
        assert capsys.readouterr().out.startswith(f"usage: ndd-stream {command}")


def test_readme_is_short_and_starts_a_new_user() -> None:
    text = README.read_text(encoding="utf-8")
    words = text.split()
    assert len(words) <= 1500, len(words)
    first = next(i for i, w in enumerate(words) if "NDD_BROKERS" in w)
    assert first < 600, "how to point the worker at your Kafka comes late"
    assert "pip install -e . && ndd-stream demo" in text
    assert "pip install -e '.[test]' && python -m pytest" in text


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    anchors = set()
    for heading in re.findall(r"^#+\s+(.+?)\s*$", text, re.M):
        anchors.add(re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-"))
    return anchors


@pytest.mark.parametrize("doc", USER_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    text = FENCE.sub("", doc.read_text(encoding="utf-8"))
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path_part, _, anchor = target.partition("#")
        path = (doc.parent / path_part).resolve() if path_part else doc
        missing_anchor = bool(anchor) and path.suffix == ".md" and path.exists() \
            and anchor not in _anchors(path)
        if not path.exists() or missing_anchor:
            broken.append(target)
    assert not broken, broken


@pytest.mark.parametrize("doc", USER_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_speak_of_the_product_not_of_its_history(doc: Path) -> None:
    hits = PROCESS_WORDS.findall(doc.read_text(encoding="utf-8"))
    assert not hits, hits


def test_no_help_output_speaks_of_the_projects_history(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for argv in [[], *([name] for name in _subcommands())]:
        with pytest.raises(SystemExit):
            main([*argv, "--help"])
        out = capsys.readouterr().out
        assert not PROCESS_WORDS.findall(out), (argv, PROCESS_WORDS.findall(out))
        assert "seeds'" not in out, argv
