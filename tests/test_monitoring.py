"""Alerts and dashboard (tools/make_monitoring.py) checked against the real thing.

- The committed rules, PrometheusRule template and dashboards are what the generator writes.
- ``promtool check rules`` accepts the plain rules and the chart's rendered ones, and
  ``promtool test rules`` (tests/prometheus/alerts.test.yml) sees every alert fire in one
  case and stay quiet in another.
- Every description links a docs section that exists.
- Every PromQL expression of the rules and the dashboard parses and names only series a
  live worker exports (or Prometheus' own ``up`` and ``ALERTS``).
- End to end: a real Prometheus (Debian's package) scrapes a real worker on Kafka with the
  rules' short-duration copy; a worker frozen (SIGSTOP) with input waiting raises
  NddDecisionsStalled and NddWorkerDown, and both clear once it goes on (SIGCONT).

Needs promtool and prometheus (apt-get install prometheus); skips without them, which
fails under NDD_CI=1.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from harness import brokers
from harness.kafka import Names, create_topics, wait_until, worker_settings
from harness.scenarios import Feeder, news_lines
from harness.worker import Process, WorkerProcess
from prometheus_client.parser import text_string_to_metric_families

from ndd_stream.kafka.broker import EmbeddedBroker
from ndd_stream.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
UNIT_TESTS = ROOT / "tests" / "prometheus" / "alerts.test.yml"
PROMETHEUS_OWN = {"up", "ALERTS"}  # series Prometheus makes itself
SCRAPE_S = 1.0


@cache
def tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_monitoring",
                                                  ROOT / "tools" / "make_monitoring.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not installed (apt-get install prometheus)")
    return path


def promtool(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary("promtool"), *map(str, args)], capture_output=True,
                          text=True, timeout=120, cwd=cwd, check=False)


def rule_list(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for g in data["groups"] for r in g["rules"]]


def plain_rules() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "deploy" / "alerts.yml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def render_chart(values: dict[str, Any]) -> list[dict[str, Any]]:
    helm = pytest.importorskip("helm_python", reason="pip install helm-python-sdk")
    with helm.Chart.load(ROOT / "helm" / "ndd-stream") as chart:
        out = chart.render(values, name="news", namespace="ndd", is_install=True)
    return [doc for path, text in sorted(out.items()) if not path.endswith("NOTES.txt")
            for doc in yaml.safe_load_all(text) if doc]


# --- generated files ----------------------------------------------------------------------


def test_committed_files_are_what_the_generator_writes() -> None:
    pytest.importorskip("grafana_foundation_sdk", reason="pip install -e '.[test]'")
    stale = [str(path.relative_to(ROOT)) for path, text in tool().generated().items()
             if not path.exists() or path.read_text(encoding="utf-8") != text]
    assert not stale, f"run `python tools/make_monitoring.py` and commit: {stale}"


def test_plain_rules_are_the_builders() -> None:
    assert plain_rules() == tool().rules()


# --- promtool -----------------------------------------------------------------------------


def test_promtool_checks_the_plain_and_the_rendered_rules(tmp_path: Path) -> None:
    result = promtool("check", "rules", ROOT / "deploy" / "alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    for name, values in (
        ("default", {}),
        ("custom", {"config": {"partitions": 12}, "resources": {"limits": {"memory": "1500Mi"}},
                    "prometheusRule": {"lagThreshold": 500, "lagFor": "5m"}}),
    ):
        objects = render_chart({**values, "prometheusRule": {
            **values.get("prometheusRule", {}), "enabled": True}})
        (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
        path = tmp_path / f"{name}.yml"
        path.write_text(yaml.safe_dump(rule["spec"]), encoding="utf-8")
        result = promtool("check", "rules", path)
        assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_fire_and_stay_quiet_for_every_alert(tmp_path: Path) -> None:
    """Every alert has a case where it fires and one where it does not; the cases pass."""
    data = plain_rules()
    for rule in rule_list(data):  # the summary only: descriptions are checked below
        rule["annotations"] = {"summary": rule["annotations"]["summary"]}
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(data), encoding="utf-8")
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    result = promtool("test", "rules", UNIT_TESTS.name, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    cases = yaml.safe_load(UNIT_TESTS.read_text(encoding="utf-8"))
    fires: set[str] = set()
    quiet: set[str] = set()
    for case in cases["tests"]:
        for check in case["alert_rule_test"]:
            (fires if check["exp_alerts"] else quiet).add(check["alertname"])
    names = {r["alert"] for r in rule_list(data)}
    assert fires == names, f"no firing case for {sorted(names - fires)}"
    assert quiet == names, f"no quiet case for {sorted(names - quiet)}"


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors (as tests/test_docs.py computes them)."""
    headings = re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def test_every_alert_says_what_to_do_and_links_the_docs() -> None:
    for rule in rule_list(plain_rules()):
        annotations = rule["annotations"]
        doc = annotations["runbook"]
        assert annotations["description"].endswith(f" See {doc}."), rule["alert"]
        path, _, anchor = doc.partition("#")
        assert (ROOT / path).exists(), doc
        assert anchor in _anchors(ROOT / path), f"{rule['alert']}: {doc}"
        assert rule["labels"]["severity"] in {"critical", "warning"}


def test_docs_list_every_alert_and_panel() -> None:
    """docs/DEPLOYMENT.md's tables name every alert and every dashboard panel."""
    docs = (ROOT / "docs" / "DEPLOYMENT.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| ([^|]+?) \|", docs, flags=re.M))
    data = json.loads((ROOT / "deploy" / "grafana" / "ndd-stream.json").read_text())
    names = {r["alert"] for r in rule_list(plain_rules())} | {p["title"] for p in data["panels"]}
    assert not names - rows


# --- the chart's PrometheusRule -------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "params", "absent"),
    [
        ({}, {}, set()),
        ({"config": {"partitions": 12, "shards": 2},
          "resources": {"limits": {"memory": "1500Mi", "cpu": "1"},
                        "requests": {"memory": "1Gi", "cpu": "1"}},
          "prometheusRule": {"lagThreshold": 500, "lagFor": "5m", "commitSeconds": 0.5,
                             "memoryRatio": 0.9, "labels": {"release": "kps"}}},
         {"lag_threshold": "500", "lag_for": "5m", "commit_seconds": "0.5",
          "memory_ratio": "0.9", "partitions": "12", "memory_bytes": str(1500 << 20)},
         {"NddPartitionsNotReady"}),
        ({"resources": {"limits": {"memory": None}}}, {}, {"NddMemoryNearLimit"}),
    ],
    ids=["default", "custom", "no-memory-limit"],
)
def test_chart_renders_the_same_rules_with_the_releases_values(
    values: dict[str, Any], params: dict[str, str], absent: set[str]
) -> None:
    objects = render_chart({**values, "prometheusRule": {
        **values.get("prometheusRule", {}), "enabled": True}})
    (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["name"] == "news-ndd-stream"
    for key, value in values.get("prometheusRule", {}).get("labels", {}).items():
        assert rule["metadata"]["labels"][key] == value
    m = tool()
    release = m.Params(selector='job="news-ndd-stream-metrics", namespace="ndd"',
                       **{"memory_bytes": str(2 << 30), **params})
    want = [r for r in rule_list(m.rules(release)) if r["alert"] not in absent]
    assert rule_list(rule["spec"]) == want


@pytest.mark.parametrize(("limit", "bytes_"), [("2Gi", 2 << 30), ("1500Mi", 1500 << 20),
                                              ("512Ki", 512 << 10), ("3G", 3 * 10**9),
                                              ("2.5Gi", 5 << 29), ("1073741824", 1 << 30)])
def test_chart_reads_the_memory_limit_in_bytes(limit: str, bytes_: int) -> None:
    objects = render_chart({"prometheusRule": {"enabled": True},
                            "resources": {"limits": {"memory": limit}}})
    (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
    (memory,) = [r for r in rule_list(rule["spec"]) if r["alert"] == "NddMemoryNearLimit"]
    assert memory["expr"].endswith(f"> 0.85 * {bytes_}")


def test_chart_rejects_a_memory_limit_it_cannot_read() -> None:
    helm = pytest.importorskip("helm_python", reason="pip install helm-python-sdk")
    with pytest.raises(helm.HelmError, match="not a quantity"):
        render_chart({"prometheusRule": {"enabled": True},
                      "resources": {"limits": {"memory": "2 gigs", "cpu": "1"}}})


@pytest.mark.parametrize(("key", "value"), [("lagFor", "soon"), ("lagThreshold", 0),
                                            ("memoryRatio", 1.5), ("commitSeconds", 0)])
def test_chart_schema_rejects_rule_settings_prometheus_would_not_take(key: str,
                                                                    value: Any) -> None:
    helm = pytest.importorskip("helm_python", reason="pip install helm-python-sdk")
    with pytest.raises(helm.HelmError, match=key):
        render_chart({"prometheusRule": {"enabled": True, key: value}})


def test_chart_dashboard_configmap_holds_the_dashboard() -> None:
    objects = render_chart({"grafanaDashboard": {"enabled": True,
                                                 "annotations": {"grafana_folder": "News"}}})
    (cm,) = [o for o in objects if o["kind"] == "ConfigMap"
             and o["metadata"]["name"] == "news-ndd-stream-dashboard"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "News"}
    chart_copy = ROOT / "helm" / "ndd-stream" / "dashboards" / "ndd-stream.json"
    assert json.loads(cm["data"]["ndd-stream.json"]) == json.loads(chart_copy.read_text())
    assert not [o for o in render_chart({}) if o["kind"] in ("PrometheusRule",)
                or o["metadata"]["name"].endswith("-dashboard")]


# --- expressions ------------------------------------------------------------------------------


def dashboard_exprs() -> list[str]:
    data = json.loads((ROOT / "deploy" / "grafana" / "ndd-stream.json").read_text())
    return [t["expr"] for p in data["panels"] for t in p.get("targets", [])]


def dashboard_as_promql(expr: str) -> str:
    """A dashboard query with Grafana's variables filled in, as Prometheus would get it."""
    return expr.replace("$__rate_interval", "1m").replace("$job", ".*") \
        .replace("$instance", ".*")


_KEYWORDS = {"and", "or", "unless", "offset", "bool", "by", "without", "on", "ignoring",
             "group_left", "group_right", "inf", "nan"}


def series_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (label matchers, ranges, grouping
    labels, strings and function names left out)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = re.findall(r"(?<![\w.$])([A-Za-z_:][\w:]*)(?![\w:])(?!\s*\()", text)
    return {n for n in names if n.lower() not in _KEYWORDS}


def test_series_names_finds_the_selected_metrics() -> None:
    assert series_names('sum by (le) (rate(a_bucket{job=~"x"}[5m])) > 2') == {"a_bucket"}
    assert series_names("x unless x offset 15m or absent(up{j=\"a\"})") == {"x", "up"}
    assert series_names("max by (a, b) (y) > 0.85 * 2147483648") == {"y"}


def test_every_expression_parses(tmp_path: Path) -> None:
    """promtool parses every dashboard query (as recording rules) and the rules."""
    records = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query{i}", "expr": dashboard_as_promql(e)}
        for i, e in enumerate(dashboard_exprs())]}]}
    path = tmp_path / "dashboard.yml"
    path.write_text(yaml.safe_dump(records), encoding="utf-8")
    result = promtool("check", "rules", path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(dashboard_exprs()) >= 15


# --- a real Prometheus, a real worker -------------------------------------------------------

FAST = dict(down_for="5s", absent_for="10s", stall_window="10s", stall_lag_window="2m",
            stall_for="5s", event_window="1m", restart_window="1m", commit_window="30s",
            commit_for="10s", ready_for="30s", memory_for="10s")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Prometheus:
    process: Process
    port: int

    @classmethod
    def start(cls, binary: str, config: Path, tmp: Path) -> Prometheus:
        """A Prometheus on a free loopback port, ready (else the test fails)."""
        port = _free_port()
        process = Process([binary, f"--config.file={config}",
                           f"--storage.tsdb.path={tmp / 'tsdb'}",
                           f"--web.listen-address=127.0.0.1:{port}"],
                          tmp / "prometheus.log").start()
        prometheus = cls(process, port)
        if not wait_until(prometheus.ready, 60):
            process.stop()
            pytest.fail(f"Prometheus not ready: {process.log_tail()}")
        return prometheus

    def get(self, path: str, **params: str) -> Any:
        url = f"http://127.0.0.1:{self.port}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=5) as resp:
            body = json.loads(resp.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.get("/api/v1/query", query=expr)["result"]
        return result

    def value(self, expr: str) -> float | None:
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None

    def alerts(self, name: str) -> dict[str, str]:
        """Instance -> state (pending, firing) of the alert ``name``."""
        return {a["labels"].get("instance", ""): a["state"]
                for a in self.get("/api/v1/alerts")["alerts"]
                if a["labels"]["alertname"] == name}

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2):
                return True
        except OSError:
            return False


def test_the_compose_prometheus_starts_with_every_alert(tmp_path: Path) -> None:
    """deploy/prometheus.yml as the compose profile runs it: a real Prometheus loads it and
    the rules beside it (the profile's Prometheus; Docker itself is not here)."""
    prometheus = Prometheus.start(binary("prometheus"), ROOT / "deploy" / "prometheus.yml",
                                  tmp_path)
    try:
        (group,) = prometheus.get("/api/v1/rules")["groups"]
        assert group["file"].endswith("alerts.yml")
        assert [r["name"] for r in group["rules"]] == [
            r["alert"] for r in rule_list(plain_rules())]
        assert all(r["health"] != "err" for r in group["rules"])
    finally:
        prometheus.process.stop()


@dataclass
class Live:
    settings: Settings
    worker: WorkerProcess
    prometheus: Prometheus
    target: str  # the worker's instance label


@pytest.fixture(scope="module")
def live(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """A worker on the test broker and a Prometheus scraping it every second with the
    short-duration rules."""
    prometheus_bin = binary("prometheus")
    binary("promtool")
    tmp = tmp_path_factory.mktemp("monitoring")
    # on Kafka a long session: the frozen worker keeps its partitions and goes on where it
    # was (Tansu holds a group join for half the session: its short one, and a rebalance)
    session = 90.0 if brokers.is_kafka() else brokers.session_timeout_s()
    settings = worker_settings(broker.bootstrap, Names("monitoring").suffix,
                               data_dir=tmp / "data", session_timeout_s=session,
                               broker_timeout_s=300.0)
    create_topics(settings)
    worker = WorkerProcess(settings, tmp / "worker.log").start()
    prometheus: Prometheus | None = None
    try:
        port = worker.web_port(timeout=60)
        assert port, worker.log_tail()
        target = f"127.0.0.1:{port}"
        m = tool()
        rules = m.rules(m.Params(), m.Timing(**FAST))
        (tmp / "alerts.yml").write_text(yaml.safe_dump(rules), encoding="utf-8")
        config = {
            "global": {"scrape_interval": f"{SCRAPE_S:.0f}s",
                       "scrape_timeout": "900ms", "evaluation_interval": "1s"},
            "rule_files": ["alerts.yml"],
            "scrape_configs": [{"job_name": "ndd-stream",
                                "static_configs": [{"targets": [target]}]}],
        }
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
        prometheus = Prometheus.start(prometheus_bin, tmp / "prometheus.yml", tmp)
        assert wait_until(lambda: prometheus.value(
            f'up{{job="ndd-stream", instance="{target}"}}') == 1.0, 60), \
            prometheus.process.log_tail()
        yield Live(settings, worker, prometheus, target)
    finally:
        if worker.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                worker.proc.send_signal(signal.SIGCONT)
        worker.stop()
        if prometheus is not None:
            prometheus.process.stop()


def exported_series(live: Live) -> set[str]:
    """Every series name the worker's /metrics declares (labelled metrics that have no
    sample yet included: their # TYPE line names them)."""
    port = live.worker.web_port(timeout=0)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum",
                                                                 "_created"),
                "summary": ("_count", "_sum", "_created"), "gauge": ("",), "unknown": ("",)}
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names |= {family.name + s for s in suffixes[family.type]}
        names |= {s.name for s in family.samples}
    return names


def test_every_expression_names_only_series_a_worker_exports(live: Live) -> None:
    exported = exported_series(live) | PROMETHEUS_OWN
    assert {"ndd_items_total", "ndd_dlq_total", "ndd_lost_records_total",
            "process_resident_memory_bytes"} <= exported
    exprs = {f"rule {r['alert']}": r["expr"] for r in rule_list(plain_rules())}
    exprs |= {f"dashboard query {i}": e for i, e in enumerate(dashboard_exprs())}
    data = json.loads((ROOT / "deploy" / "grafana" / "ndd-stream.json").read_text())
    variables = [v["query"] for v in data["templating"]["list"] if v["type"] == "query"]
    assert variables
    for query in variables:  # label_values(<series selector>, <label>)
        found = re.fullmatch(r"label_values\((.+), *\w+\)", query)
        assert found, query
        exprs[f"variable {query}"] = found[1]
    unknown = {where: sorted(series_names(e) - exported) for where, e in exprs.items()
               if series_names(e) - exported}
    assert not unknown
    assert all(series_names(e) for e in exprs.values())


def test_prometheus_answers_every_dashboard_query(live: Live) -> None:
    assert wait_until(lambda: (live.prometheus.value("sum(ndd_assigned_partitions)") or 0)
                      >= live.settings.partitions, 90), live.worker.log_tail()
    for expr in dashboard_exprs():
        live.prometheus.query(dashboard_as_promql(expr))  # raises unless it evaluates
    for always in ('sum(up{job=~".*", instance=~".*"})',
                   'sum(ndd_assigned_partitions{job=~".*", instance=~".*"})'):
        assert always in [dashboard_as_promql(e) for e in dashboard_exprs()]
        assert live.prometheus.value(always)


@pytest.mark.timeout(240)
def test_a_frozen_worker_with_input_waiting_raises_the_stall_alert(live: Live) -> None:
    prom, worker, target = live.prometheus, live.worker, live.target
    stalled, down = "NddDecisionsStalled", "NddWorkerDown"
    assert wait_until(lambda: (prom.value("sum(ndd_assigned_partitions)") or 0)
                      >= live.settings.partitions, 90), worker.log_tail()
    assert not prom.alerts(stalled) and not prom.alerts(down)
    # a backlog: the worker decides it for longer than a few scrapes (~10 s at 1,000/s)
    Feeder(live.settings, news_lines(10_000, seed=45), rate=50_000).start().join(timeout=120)
    waiting = f'max(ndd_consumer_lag{{instance="{target}"}})'
    decided = f'sum(ndd_items_total{{instance="{target}"}})'
    deciding = f'sum(increase(ndd_items_total{{instance="{target}"}}[{FAST["stall_window"]}]))'

    def busy() -> bool:
        """Input waits, the worker decides, and the alert is quiet."""
        return ((prom.value(waiting) or 0) > 0 and (prom.value(deciding) or 0) > 0
                and not prom.alerts(stalled))

    assert wait_until(busy, 60, interval=0.1), (prom.alerts(stalled), worker.log_tail())
    assert worker.proc is not None
    worker.proc.send_signal(signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        last_lag = prom.value(f'max(last_over_time(ndd_consumer_lag{{instance="{target}"}}[1m]))')
        assert last_lag and last_lag > 0, "the worker caught up before it was frozen"
        decided_before = prom.value(
            f'sum(last_over_time(ndd_items_total{{instance="{target}"}}[1m]))') or 0
        # within the rule's window + for (10 s + 5 s), scrape and evaluation (1 s each);
        # never before its for
        assert wait_until(lambda: prom.alerts(stalled).get(target) == "firing", 45), \
            prom.alerts(stalled)
        fired_after = time.monotonic() - stopped
        assert fired_after >= 5, f"fired after {fired_after:.1f}s, before its for (5 s)"
        assert prom.alerts(down).get(target) == "firing"
    finally:
        worker.proc.send_signal(signal.SIGCONT)
    assert wait_until(lambda: not prom.alerts(stalled) and not prom.alerts(down), 60), (
        prom.alerts(stalled), worker.log_tail())
    assert worker.alive()
    # resolved because the worker decides again (the same worker: no restart)
    assert wait_until(lambda: (prom.value(decided) or 0) > decided_before, 10)
    assert prom.value(f'changes(process_start_time_seconds{{instance="{target}"}}[5m])') == 0
