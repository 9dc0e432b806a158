"""docker-compose.yml, deploy/prometheus.yml and deploy/grafana/.

No Docker engine is needed: `docker-compose config` (Debian's docker-compose package)
parses, interpolates and validates the file against the Compose specification it
ships, and the resolved model is validated again, with jsonschema, against that
specification file. Then the promises of the setup are asserted: single-node Kafka in
KRaft mode from apache/kafka 4.x with a healthcheck, a one-shot `topics apply`, a `worker`
that scales (no container_name, no fixed host port, its own anonymous state volume per
replica), a loader of the bundled sample feed, and Prometheus with the alert rules and
Grafana with the dashboard behind a profile.

Needs: apt-get install -y docker-compose prometheus (promtool)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ndd_stream.cli.main import main as cli_main
from ndd_stream.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
PROMETHEUS = ROOT / "deploy" / "prometheus.yml"
STATE_DIR = "/var/lib/ndd-stream"
SAMPLE_FEED = "/usr/share/ndd-stream/sample_feed.jsonl"
SPEC_CANDIDATES = [
    Path("/usr/lib/python3/dist-packages/compose/config/compose_spec.json"),
    Path("/usr/local/lib/python3/dist-packages/compose/config/compose_spec.json"),
]

Obj = dict[str, Any]


def docker_compose() -> list[str]:
    exe = shutil.which("docker-compose")
    if exe:
        return [exe]
    pytest.skip("docker-compose not installed: apt-get install -y docker-compose")


def clean_env() -> dict[str, str]:
    """No NDD_*/KAFKA_* overrides from the caller's shell leak into the check."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
    return {k: v for k, v in os.environ.items() if k in keep}


def compose_config(*args: str, file: Path = COMPOSE,
                   shell: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`docker-compose config` with a clean environment plus ``shell`` (variables the
    user exported)."""
    return subprocess.run(
        [*docker_compose(), "--project-directory", str(ROOT), "-f", str(file), *args, "config"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean_env(), **(shell or {})},
        cwd=ROOT,
    )


@pytest.fixture(scope="module")
def resolved() -> Obj:
    """The model after docker-compose validated and resolved it, all profiles on."""
    proc = compose_config("--profile", "monitoring")
    assert proc.returncode == 0, proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr
    data = yaml.safe_load(proc.stdout)
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def raw() -> Obj:
    data = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def service(model: Obj, name: str) -> Obj:
    svc = model["services"][name]
    assert isinstance(svc, dict)
    return svc


def env(svc: Obj) -> dict[str, str]:
    raw_env = svc.get("environment") or {}
    if isinstance(raw_env, list):
        raw_env = dict(item.split("=", 1) for item in raw_env)
    return {k: str(v) for k, v in raw_env.items()}


def ndd_services(model: Obj) -> Iterator[tuple[str, Obj]]:
    for name, svc in model["services"].items():
        if str(svc.get("image", "")).startswith("ndd-stream") or "build" in svc:
            yield name, svc


# --- the real tool ---------------------------------------------------------------------


def test_docker_compose_config_accepts_the_file() -> None:
    for args in ((), ("--profile", "monitoring")):
        proc = compose_config(*args)
        assert proc.returncode == 0, proc.stderr
        services = yaml.safe_load(proc.stdout)["services"]
        assert {"kafka", "topics", "worker", "loader"} <= set(services)


def test_docker_compose_config_is_live(tmp_path: Path) -> None:
    """The validator really validates: a broken file fails."""
    bad = tmp_path / "docker-compose.yml"
    bad.write_text(
        "services:\n  a:\n    image: x\n    depends_on:\n      b: {condition: when_ready}\n"
        "  b:\n    image: y\n",
        encoding="utf-8",
    )
    proc = compose_config(file=bad)
    assert proc.returncode != 0
    assert "condition" in proc.stderr


def test_resolved_model_matches_the_compose_spec(resolved: Obj, raw: Obj) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    spec_path = next((p for p in SPEC_CANDIDATES if p.exists()), None)
    if spec_path is None:
        pytest.skip(
            "compose_spec.json ships with docker-compose: apt-get install -y docker-compose"
        )
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    spec.pop("$schema", None)
    validator = jsonschema.Draft7Validator(spec)
    external = yaml.safe_load(
        (ROOT / "deploy" / "compose-external-kafka.yml").read_text(encoding="utf-8")
    )
    for model in (resolved, raw, external):
        errors = sorted(validator.iter_errors(model), key=lambda e: list(e.path))
        assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]


# --- Kafka ----------------------------------------------------------------------------


def test_kafka_is_single_node_kraft(resolved: Obj) -> None:
    kafka = service(resolved, "kafka")
    # A pinned Apache Kafka 4.x release: the one the clients are held to
    # (tests/test_kafka4_versions.py); `peek` runs its console consumer from the same image.
    assert re.fullmatch(r"apache/kafka:4\.\d+\.\d+", kafka["image"]), kafka["image"]
    assert service(resolved, "peek")["image"] == kafka["image"]
    e = env(kafka)
    assert set(e["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert e["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"{e['KAFKA_NODE_ID']}@kafka:9093"
    assert "zookeeper" not in json.dumps(kafka).lower()
    for key in (
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR",
    ):
        assert e[key] == "1", key
    assert e["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false", "topics come from topics/"
    listeners = dict(x.split("://") for x in e["KAFKA_ADVERTISED_LISTENERS"].split(","))
    assert listeners["INTERNAL"] == "kafka:19092"
    assert e["KAFKA_LOG_DIRS"] == "/var/lib/kafka/data"
    assert any(str(v).endswith(":/var/lib/kafka/data:rw") for v in kafka["volumes"])
    check = kafka["healthcheck"]
    assert "kafka-broker-api-versions.sh" in " ".join(check["test"])
    assert check["retries"] >= 5


# --- ndd-stream services -------------------------------------------------------------


def test_all_ndd_services_use_one_image_and_real_settings(resolved: Obj) -> None:
    fields = set(Settings.model_fields)
    images = set()
    names = []
    for name, svc in ndd_services(resolved):
        names.append(name)
        images.add(svc["image"])
        e = env(svc)
        assert e["NDD_BROKERS"] == "kafka:19092", name
        for var in e:
            assert var.startswith("NDD_") and var[4:].lower() in fields, (name, var)
            assert "PASSWORD" not in var, (name, var)
    assert sorted(names) == ["loader", "topics", "view", "worker"]
    assert len(images) == 1
    builders = [n for n, s in resolved["services"].items() if "build" in s]
    assert builders == ["worker"], "one service builds the image, the others reuse it"
    assert service(resolved, "worker")["build"]["context"] == str(ROOT)


def test_worker_defaults_match_settings_defaults(resolved: Obj) -> None:
    """Every setting the file gives the worker, except the broker address and the bind
    address a container needs, repeats the Settings default (e.g. NDD_THRESHOLD), so the
    file cannot drift from the code."""
    defaults = Settings.model_fields
    worker = env(service(resolved, "worker"))
    assert worker["NDD_WEB_HOST"] == "0.0.0.0"  # /metrics reachable from Prometheus
    for var, value in worker.items():
        if var in ("NDD_BROKERS", "NDD_WEB_HOST"):
            continue
        field = var[4:].lower()
        parsed = Settings.model_validate({field: value}).model_dump()[field]
        assert parsed == defaults[field].get_default(call_default_factory=True), var


def test_topics_service_is_one_shot(resolved: Obj) -> None:
    topics = service(resolved, "topics")
    assert topics["command"] == ["topics", "apply"]
    assert topics["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert topics.get("restart", "no") == "no"


def test_worker_scales(resolved: Obj, raw: Obj) -> None:
    worker = service(resolved, "worker")
    assert worker["command"] == ["worker"]
    assert "container_name" not in worker
    assert "hostname" not in worker
    for port in worker.get("ports", []):
        assert "published" not in port, "a fixed host port would break --scale"
        assert port["target"] == Settings.model_fields["web_port"].default
    assert worker["depends_on"]["topics"]["condition"] == "service_completed_successfully"
    assert worker["depends_on"]["kafka"]["condition"] == "service_healthy"
    # one anonymous volume per replica for the state directory: no named volume, no bind
    assert raw["services"]["worker"]["volumes"] == [STATE_DIR]
    (volume,) = worker["volumes"]
    assert volume in (STATE_DIR, f"{STATE_DIR}:rw"), volume
    assert STATE_DIR not in json.dumps(resolved.get("volumes", {}))
    # hardened like the Helm chart: read-only root, writable /tmp and state only
    assert worker["read_only"] is True
    assert worker["tmpfs"] == ["/tmp"]
    assert worker["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in worker["security_opt"]


def test_every_ndd_service_sees_the_same_shards(resolved: Obj) -> None:
    """NDD_SHARDS (default 1) reaches topics (which creates the shards topics from it), the
    workers and the view alike: a topics service without it would not create them."""
    for name, svc in ndd_services(resolved):
        assert env(svc)["NDD_SHARDS"] == "1", name
    assert env(service(resolved, "worker"))["NDD_SCOPE"] == "channel"


def test_shards_and_scope_come_from_the_shell() -> None:
    """`NDD_SCOPE=global NDD_SHARDS=2 docker compose up --scale worker=2`: the values reach
    the services, and the topics service then resolves both shards topics with
    8 x 2 partitions."""
    from ndd_stream.kafka import topics

    assert "NDD_SCOPE=global NDD_SHARDS=2 docker compose up" in COMPOSE.read_text(
        encoding="utf-8")
    proc = compose_config(shell={"NDD_SCOPE": "global", "NDD_SHARDS": "2"})
    assert proc.returncode == 0, proc.stderr
    model = yaml.safe_load(proc.stdout)
    for name, svc in ndd_services(model):
        assert env(svc)["NDD_SHARDS"] == "2", name
    worker = env(service(model, "worker"))
    assert worker["NDD_SCOPE"] == "global"
    assert Settings.model_validate({k[4:].lower(): v for k, v in worker.items()}).shards == 2
    job = {k[4:].lower(): v for k, v in env(service(model, "topics")).items()}
    resolved, _ = topics.resolve(Settings.model_validate(job),
                                 topics.load_definitions(ROOT / "topics"))
    got = {t.key: t.partitions for t in resolved if t.key.startswith("shards")}
    assert got == {"shards": 16, "shards_changelog": 16}


def test_loader_streams_the_bundled_sample_feed(resolved: Obj) -> None:
    loader = service(resolved, "loader")
    assert loader["command"] == ["produce", SAMPLE_FEED]
    assert loader["depends_on"]["topics"]["condition"] == "service_completed_successfully"
    assert loader.get("restart", "no") == "no"
    # the image puts the package's sample feed at that path
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(rf"^COPY ndd_stream/data/sample_feed\.jsonl {re.escape(SAMPLE_FEED)}$",
                     dockerfile, re.MULTILINE)  # fmt: skip


def test_one_shots_have_no_healthcheck(resolved: Obj) -> None:
    for name in ("topics", "loader"):
        check = service(resolved, name)["healthcheck"]
        assert check.get("disable") is True or check.get("test") == ["NONE"], name


def test_peek_shows_decisions(resolved: Obj) -> None:
    peek = service(resolved, "peek")
    assert peek["image"] == service(resolved, "kafka")["image"]
    cmd = peek["command"]
    assert cmd[0].endswith("kafka-console-consumer.sh")
    topic = cmd[cmd.index("--topic") + 1]
    assert topic == Settings.model_fields["decisions_topic"].default
    # exactly-once outputs: an aborted transaction's records must not show
    assert cmd[cmd.index("--isolation-level") + 1] == "read_committed"


def _check_view(view: Obj) -> None:
    """The web view: its default port, published on the host's loopback only (it shows
    item texts and has no login), hardened like the worker, after the topics exist."""
    assert view["command"][0] == "view"
    port = int(view["command"][view["command"].index("--port") + 1])
    host = view["command"][view["command"].index("--host") + 1]
    assert host == "0.0.0.0"  # inside the container; the host side is loopback
    (published,) = view["ports"]
    if isinstance(published, str):  # Compose v1 keeps the short syntax: IP:HOST:CONTAINER
        host_ip, host_port, target = published.split("/")[0].split(":")
        published = {"host_ip": host_ip, "published": host_port, "target": int(target)}
    assert published["target"] == port
    assert published["host_ip"] == "127.0.0.1"
    assert str(published["published"]) == "6067"
    assert view["read_only"] is True and view["cap_drop"] == ["ALL"]
    assert view["tmpfs"] == ["/tmp"]
    assert view["depends_on"]["topics"]["condition"] == "service_completed_successfully"
    # its own healthcheck: the image's asks a worker's /health on NDD_WEB_PORT
    check = " ".join(view["healthcheck"]["test"])
    assert f"127.0.0.1:{port}/api/status" in check


def test_view_serves_the_web_page_on_loopback(resolved: Obj) -> None:
    view = service(resolved, "view")
    _check_view(view)
    assert view["image"] == service(resolved, "worker")["image"]
    # the command parses: the CLI accepts exactly these options
    with pytest.raises(SystemExit) as exit_info:
        cli_main([*view["command"], "--help"])
    assert exit_info.value.code == 0


# --- Prometheus ---------------------------------------------------------------------------


def test_prometheus_is_optional_and_scrapes_every_worker(raw: Obj, resolved: Obj) -> None:
    prom = service(resolved, "prometheus")
    assert prom["profiles"] == ["monitoring"]
    assert "monitoring" not in json.dumps(
        {k: v for k, v in raw["services"].items() if k not in ("prometheus", "grafana")}
    )
    assert not prom["image"].endswith(":latest")
    mounts = [str(v) for v in raw["services"]["prometheus"]["volumes"]]
    assert mounts == ["./deploy/prometheus.yml:/etc/prometheus/prometheus.yml:ro",
                      "./deploy/alerts.yml:/etc/prometheus/alerts.yml:ro"]
    config = yaml.safe_load(PROMETHEUS.read_text(encoding="utf-8"))
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "ndd-stream"  # the job deploy/alerts.yml selects
    assert job["metrics_path"] == "/metrics"
    (sd,) = job["dns_sd_configs"]
    assert sd["names"] == ["worker"] and sd["type"] == "A"
    assert sd["port"] == Settings.model_fields["web_port"].default
    assert config["rule_files"] == ["alerts.yml"]  # beside prometheus.yml, in and out


def test_prometheus_config_and_its_rules_pass_promtool() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (apt-get install prometheus)")
    proc = subprocess.run([promtool, "check", "config", str(PROMETHEUS)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "alerts.yml" in proc.stdout and "SUCCESS: 1 rule files found" in proc.stdout


def test_grafana_is_optional_and_shows_the_dashboard(raw: Obj, resolved: Obj) -> None:
    grafana = service(resolved, "grafana")
    assert grafana["profiles"] == ["monitoring"]
    assert not grafana["image"].endswith(":latest")
    (port,) = grafana["ports"]
    assert str(port).startswith("127.0.0.1:") and str(port).split(":")[2].startswith("3000")
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"
    mounts = {m.split(":")[1]: ROOT / m.split(":")[0]
              for m in raw["services"]["grafana"]["volumes"]}
    provisioning = mounts["/etc/grafana/provisioning"]
    (source,) = yaml.safe_load(
        (provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    (provider,) = yaml.safe_load(
        (provisioning / "dashboards" / "ndd-stream.yml").read_text())["providers"]
    dashboards = [path for path, src in mounts.items()
                  if path.startswith(provider["options"]["path"] + "/")]
    assert dashboards == [grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]]
    dashboard = json.loads(mounts[dashboards[0]].read_text())
    assert dashboard["uid"] == "ndd-stream" and dashboard["panels"]


# --- deploy/compose-external-kafka.yml ----------------------------------------------------

EXTERNAL = ROOT / "deploy" / "compose-external-kafka.yml"


def test_external_kafka_file_needs_brokers() -> None:
    proc = compose_config(file=EXTERNAL)
    assert proc.returncode != 0
    assert "NDD_BROKERS" in proc.stderr


def test_external_kafka_file() -> None:
    proc = subprocess.run(
        [*docker_compose(), "-f", str(EXTERNAL), "config"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean_env(), "NDD_BROKERS": "b1.example.com:9093"},
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    model = yaml.safe_load(proc.stdout)
    assert set(model["services"]) == {"topics", "worker", "view"}, "no bundled Kafka"
    fields = set(Settings.model_fields)
    raw_file = yaml.safe_load(EXTERNAL.read_text(encoding="utf-8"))
    _check_view(service(model, "view"))
    for name in ("topics", "worker", "view"):
        svc = service(model, name)
        e = svc["environment"]
        assert e["NDD_BROKERS"] == "b1.example.com:9093"
        assert all(k[4:].lower() in fields for k in e), name
        # credentials pass through from the shell, never written in the file
        assert raw_file["services"][name]["environment"]["NDD_SASL_PASSWORD"] is None
        assert e["NDD_SASL_PASSWORD"] is None, "unset in the shell -> not set"
        assert any(str(v).endswith(":/etc/ndd-stream/certs:ro") for v in svc["volumes"]), name
    assert raw_file["services"]["view"]["environment"]["NDD_VIEW_PASSWORD"] is None
    # shards pass through like the rest: unset -> the Settings default
    for name in ("topics", "worker", "view"):
        assert service(model, name)["environment"]["NDD_SHARDS"] is None, name
    assert service(model, "view")["environment"]["NDD_VIEW_PASSWORD"] is None  # unset: no login
    worker = service(model, "worker")
    assert worker["build"]["context"] == str(ROOT)
    assert "container_name" not in worker
    assert all("published" not in p for p in worker["ports"])
    assert STATE_DIR in worker["volumes"]
    assert worker["depends_on"]["topics"]["condition"] == "service_completed_successfully"


def test_external_kafka_file_passes_shards_to_every_service() -> None:
    proc = subprocess.run(
        [*docker_compose(), "-f", str(EXTERNAL), "config"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean_env(), "NDD_BROKERS": "b1.example.com:9093", "NDD_SHARDS": "3",
             "NDD_SCOPE": "global"},
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    model = yaml.safe_load(proc.stdout)
    for name in ("topics", "worker", "view"):
        assert service(model, name)["environment"]["NDD_SHARDS"] == "3", name
    assert service(model, "worker")["environment"]["NDD_SCOPE"] == "global"
