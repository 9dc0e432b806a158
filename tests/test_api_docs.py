"""docs/API.md: its examples run as doctests, and it documents every public name."""

from __future__ import annotations

import contextlib
import doctest
import inspect
import io
import os
import re
from pathlib import Path

import pytest

import ndd_stream
from ndd_stream import Decision, Filter

API_MD = Path(__file__).resolve().parent.parent / "docs" / "API.md"


@pytest.fixture(autouse=True)
def _no_ndd_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("NDD_"):
            monkeypatch.delenv(name)


def _ten_lines() -> tuple[str, str]:
    """The ten-line example's code and the output the page says it prints."""
    text = API_MD.read_text(encoding="utf-8").split("## Ten lines", 1)[1]
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    printed = text.split("```text\n", 1)[1].split("```", 1)[0]
    return code, printed


def test_the_examples_of_api_md_run() -> None:
    """The ten lines print what the page shows; the doctests after them continue that
    session."""
    code, printed = _ten_lines()
    session: dict[str, object] = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(API_MD), "exec"), session)
    assert out.getvalue() == printed
    result = doctest.testfile(str(API_MD), module_relative=False, globs=session, report=True,
                              optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 20
    assert result.failed == 0


def test_api_md_documents_every_public_name_and_argument() -> None:
    text = API_MD.read_text(encoding="utf-8")
    headings = re.findall(r"^### `([A-Za-z_]+)", text, re.M)
    assert sorted(headings) == sorted(ndd_stream.__all__)
    for name in inspect.signature(Filter).parameters:
        assert f"| `{name}` |" in text, name
    for method in ("decide", "decide_many", "save", "load", "settings", "window_documents"):
        assert f"`{method}" in text, method
    public = [n for n, v in vars(Decision).items()
              if not n.startswith("_") and (isinstance(v, property) or callable(v))]
    for name in public:
        assert f"`{name}" in text, f"Decision.{name} is not documented"


def test_the_ten_line_example_is_ten_lines_a_shell_takes_as_they_are() -> None:
    code, _ = _ten_lines()
    lines = [line for line in code.splitlines() if line.strip()]
    assert len(lines) <= 10
    assert not any(line.startswith(">>>") for line in lines)  # pasted as it is
