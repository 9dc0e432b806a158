"""The Helm chart helm/ndd-stream: lint and render it with the Helm Go SDK
(helm-python-sdk), validate every rendered object against the Kubernetes 1.30 OpenAPI
schemas (kubernetes-validate, offline) and assert the deployment properties the chart
promises: StatefulSet with a PVC per pod, hardened pods, probes on /health, Kafka
credentials from Secrets only, a pre-install/pre-upgrade topics Job, metrics Service,
optional ServiceMonitor, PodDisruptionBudget, NOTES on scaling.

Needs: pip install helm-python-sdk kubernetes-validate
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

helm = pytest.importorskip("helm_python", reason="pip install helm-python-sdk")
kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")

from ndd_stream.cli.main import main as cli_main  # noqa: E402
from ndd_stream.settings import Settings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "helm" / "ndd-stream"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
KUBE_VERSION = "1.33.0"
RELEASE = "news"
NAMESPACE = "ndd"
UID = 10001

Obj = dict[str, Any]

# Settings the chart sets itself (never through config).
CHART_OWNED = {
    "brokers", "security_protocol", "sasl_mechanism", "sasl_username", "sasl_password",
    "ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_check_hostname", "data_dir",
    "web_host", "web_port", "topics_file", "view_user", "view_password",
}  # fmt: skip
SECRET_ENV = {"NDD_SASL_USERNAME", "NDD_SASL_PASSWORD", "NDD_VIEW_PASSWORD"}


# --- helpers -------------------------------------------------------------------------


def load_values(path: Path) -> Obj:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def render(values: Obj | None = None) -> tuple[list[Obj], str]:
    """Render like `helm install`: every object of every template, and NOTES.txt."""
    with helm.Chart.load(CHART) as chart:
        out = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    notes = ""
    objects: list[Obj] = []
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt"):
            notes = text
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                assert isinstance(doc, dict), f"{path}: not a mapping"
                objects.append(doc)
    return objects, notes


class _UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that rejects duplicate mapping keys (PyYAML keeps the last silently)."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> Any:
    keys = [loader.construct_object(k) for k, _ in node.value]
    duplicates = sorted({str(k) for k in keys if keys.count(k) > 1})
    if duplicates:
        raise yaml.constructor.ConstructorError(
            None, None, f"duplicate keys {duplicates}", node.start_mark
        )
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def assert_unique_keys(text: str, where: str) -> None:
    try:
        yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.constructor.ConstructorError as exc:
        pytest.fail(f"{where}: {exc}")


def by_kind(objects: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[Obj], kind: str) -> Obj:
    found = by_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def pod_specs(objects: list[Obj]) -> Iterator[tuple[str, Obj]]:
    for o in objects:
        if o["kind"] in {"StatefulSet", "Job", "Deployment", "DaemonSet"}:
            yield o["kind"], o["spec"]["template"]["spec"]


def env_dict(container: Obj) -> dict[str, Obj]:
    return {e["name"]: e for e in container.get("env", [])}


def settings_from_env(env: dict[str, Obj], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Build the Settings a container would build from its environment."""
    for name in list(os.environ):
        if name.startswith("NDD_"):
            monkeypatch.delenv(name)
    for name, var in env.items():
        if "value" in var:
            monkeypatch.setenv(name, str(var["value"]))
        else:  # from a Secret: any string will do
            monkeypatch.setenv(name, "from-secret")
    return fresh_settings()


def fresh_settings() -> Settings:
    """Settings from the current environment (the plain call, spelled for mypy)."""
    no_overrides: dict[str, Any] = {}
    return Settings(**no_overrides)


CASES = [pytest.param(None, id="default")] + [pytest.param(p, id=p.stem) for p in CI_VALUES]


@pytest.fixture(scope="module", params=CASES)
def case(request: pytest.FixtureRequest) -> tuple[Obj, list[Obj], str]:
    path: Path | None = request.param
    values = load_values(path) if path else {}
    objects, notes = render(values or None)
    return values, objects, notes


# --- lint, schema, Kubernetes validation --------------------------------------------------


def test_ci_values_file_present() -> None:
    names = [p.name for p in CI_VALUES]
    assert "values-sasl.yaml" in names


@pytest.mark.parametrize("path", [None, *CI_VALUES], ids=["default", *[p.stem for p in CI_VALUES]])
def test_helm_lint_strict(path: Path | None) -> None:
    values = load_values(path) if path else None
    report = helm.lint(CHART, values, strict=True, kube_version=f"v{KUBE_VERSION}")
    assert report["total_charts_linted"] == 1
    assert not report["errors"], report
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not problems, problems


def test_every_object_is_valid_kubernetes(case: tuple[Obj, list[Obj], str]) -> None:
    _, objects, _ = case
    assert objects
    for obj in objects:
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # CRDs: test_service_monitor, tests/test_monitoring.py (promtool)
        try:
            kv.validate(obj, KUBE_VERSION, strict=True)
        except kv.ValidationError as exc:  # pragma: no cover - shows the failing object
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']}: {exc}")
        assert obj["metadata"]["name"].startswith(f"{RELEASE}-ndd-stream")
        assert obj["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE


def test_kinds(case: tuple[Obj, list[Obj], str]) -> None:
    values, objects, _ = case
    kinds = sorted(o["kind"] for o in objects)
    expected = {"StatefulSet", "Service", "Job", "PodDisruptionBudget", "ServiceAccount"}
    assert expected <= set(kinds)
    view = values.get("view", {}).get("enabled", True)
    assert [d["metadata"]["name"] for d in by_kind(objects, "Deployment")] == (
        [f"{RELEASE}-ndd-stream-view"] if view else [])
    assert "Secret" not in kinds, "the chart never creates Secrets: credentials are referenced"
    assert len(by_kind(objects, "Service")) == 2 + view  # headless + metrics (+ view)
    sm_enabled = bool(values.get("serviceMonitor", {}).get("enabled"))
    assert bool(by_kind(objects, "ServiceMonitor")) == sm_enabled
    # alerts and dashboard (checked in tests/test_monitoring.py), off by default
    rules_enabled = bool(values.get("prometheusRule", {}).get("enabled"))
    assert bool(by_kind(objects, "PrometheusRule")) == rules_enabled
    dashboard_enabled = bool(values.get("grafanaDashboard", {}).get("enabled"))
    assert dashboard_enabled == any(
        cm["metadata"]["name"] == f"{RELEASE}-ndd-stream-dashboard"
        for cm in by_kind(objects, "ConfigMap"))


# --- StatefulSet and pods ---------------------------------------------------------------


def test_statefulset_has_state_pvc_per_pod(case: tuple[Obj, list[Obj], str]) -> None:
    values, objects, _ = case
    sts = one(objects, "StatefulSet")
    spec = sts["spec"]
    assert spec["replicas"] == values.get("replicaCount", 1)
    headless = [s for s in by_kind(objects, "Service") if s["spec"].get("clusterIP") == "None"]
    assert [s["metadata"]["name"] for s in headless] == [spec["serviceName"]]
    claims = spec["volumeClaimTemplates"]
    assert [c["metadata"]["name"] for c in claims] == ["state"]
    claim = claims[0]["spec"]
    assert claim["accessModes"] == ["ReadWriteOnce"]
    size = values.get("persistence", {}).get("size", "10Gi")
    assert claim["resources"]["requests"]["storage"] == size
    assert set(spec["persistentVolumeClaimRetentionPolicy"]) == {"whenDeleted", "whenScaled"}
    pod = spec["template"]["spec"]
    assert "state" not in {v["name"] for v in pod["volumes"]}, "state must come from the PVC"
    worker = pod["containers"][0]
    mounts = {m["name"]: m["mountPath"] for m in worker["volumeMounts"]}
    assert mounts["state"] == "/var/lib/ndd-stream"
    assert env_dict(worker)["NDD_DATA_DIR"]["value"] == mounts["state"]
    # the Settings default is loopback; in a pod Prometheus and the probes come from outside
    assert env_dict(worker)["NDD_WEB_HOST"]["value"] == "0.0.0.0"
    if not values.get("resources"):  # the default fits ~95k documents at 0.3 (values.yaml)
        assert worker["resources"]["limits"]["memory"] == "2Gi"
        assert worker["resources"]["requests"]["memory"] == "1Gi"
    assert worker["args"] == ["worker"]
    assert sts["spec"]["selector"]["matchLabels"].items() <= (
        spec["template"]["metadata"]["labels"].items()
    )


def test_pods_are_hardened(case: tuple[Obj, list[Obj], str]) -> None:
    _, objects, _ = case
    specs = list(pod_specs(objects))
    assert {k for k, _ in specs} == {"StatefulSet", "Job", "Deployment"}  # the view's
    for kind, pod in specs:
        psc = pod["securityContext"]
        assert psc["runAsNonRoot"] is True, kind
        assert psc["runAsUser"] == UID and psc["runAsUser"] != 0, kind
        assert psc["fsGroup"] == UID, kind
        assert psc["seccompProfile"]["type"] == "RuntimeDefault", kind
        assert pod["automountServiceAccountToken"] is False, kind
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert "emptyDir" in volumes["tmp"], kind
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] is True, kind
            assert sc["allowPrivilegeEscalation"] is False, kind
            assert sc["readOnlyRootFilesystem"] is True, kind
            assert sc.get("privileged", False) is False, kind
            assert sc["capabilities"]["drop"] == ["ALL"], kind
            assert not sc["capabilities"].get("add"), kind
            mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
            assert mounts["/tmp"]["name"] == "tmp", kind
            if kind == "Deployment":  # the view keeps nothing: /tmp is its only writable place
                assert all(m.get("readOnly") for p, m in mounts.items() if p != "/tmp"), kind
            else:
                assert "/var/lib/ndd-stream" in mounts, kind  # the only other writable place
            for key in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][key]), (kind, key)


def test_probes_on_health(case: tuple[Obj, list[Obj], str]) -> None:
    _, objects, _ = case
    worker = one(objects, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in worker["ports"]}
    assert ports == {"http": 6066}
    assert env_dict(worker)["NDD_WEB_PORT"]["value"] == "6066"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = worker[probe]["httpGet"]
        assert get["path"] == "/health", probe
        assert get["port"] == "http", probe


# --- the web view ------------------------------------------------------------------------


def test_view_reads_what_the_workers_write(case: tuple[Obj, list[Obj], str]) -> None:
    """The web view: `ndd-stream view` on its port, the workers' exact NDD_* environment (same
    brokers, credentials, topics and group id for the lag) and Kafka TLS mounts, probes on
    /api/status, a ClusterIP Service only (it shows item texts and has no login)."""
    values, objects, notes = case
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    pod = deployment["spec"]["template"]["spec"]
    (view,) = pod["containers"]
    port = values.get("view", {}).get("port", 6067)
    assert view["args"][:5] == ["view", "--host", "0.0.0.0", "--port", str(port)]
    with pytest.raises(SystemExit) as exit_info:  # the CLI takes exactly these options
        cli_main([*view["args"], "--help"])
    assert exit_info.value.code == 0
    assert view["ports"] == [{"name": "http-view", "containerPort": port, "protocol": "TCP"}]
    for probe in ("readinessProbe", "livenessProbe"):
        assert view[probe]["httpGet"] == {"path": "/api/status", "port": "http-view"}
    worker_pod = one(objects, "StatefulSet")["spec"]["template"]["spec"]
    worker = worker_pod["containers"][0]
    auth = values.get("view", {}).get("auth", {})
    login = [e for e in view["env"] if e["name"] in ("NDD_VIEW_USER", "NDD_VIEW_PASSWORD")]
    assert [e for e in view["env"] if e not in login] == worker["env"]
    if auth.get("existingSecret"):
        assert login == [
            {"name": "NDD_VIEW_USER", "value": auth.get("user") or "viewer"},
            {"name": "NDD_VIEW_PASSWORD", "valueFrom": {"secretKeyRef": {
                "name": auth["existingSecret"], "key": auth.get("passwordKey", "password")}}},
        ]
        assert f'login: user "{auth.get("user") or "viewer"}"' in notes
    else:
        assert not login and "no login (view.auth)" in notes
    assert view["image"] == worker["image"]
    kafka_mounts = [m for m in worker["volumeMounts"] if m["name"].startswith("kafka-")]
    assert [m for m in view["volumeMounts"] if m["name"].startswith("kafka-")] == kafka_mounts
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "view"
    svc = next(s for s in by_kind(objects, "Service") if s["metadata"]["name"].endswith("-view"))
    assert svc["spec"]["type"] == "ClusterIP"
    assert svc["spec"]["selector"].items() <= labels.items()
    assert svc["spec"]["ports"][0]["targetPort"] == "http-view"
    assert f"port-forward svc/{svc['metadata']['name']} {port}:{port}" in notes
    # not selected by the workers' Services, PDB or ServiceMonitor
    pdb = one(objects, "PodDisruptionBudget")
    assert not pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_view_can_be_disabled() -> None:
    objects, notes = render({"view": {"enabled": False}})
    assert not by_kind(objects, "Deployment")
    assert not [s for s in by_kind(objects, "Service") if s["metadata"]["name"].endswith("-view")]
    assert "port-forward svc/" in notes and "-view" not in notes


def test_metrics_service_and_pdb(case: tuple[Obj, list[Obj], str]) -> None:
    _, objects, _ = case
    sts = one(objects, "StatefulSet")
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    metrics = [s for s in by_kind(objects, "Service")
               if s["metadata"]["labels"]["app.kubernetes.io/component"] == "metrics"]
    assert len(metrics) == 1
    svc = metrics[0]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert [(p["name"], p["targetPort"]) for p in svc["spec"]["ports"]] == [
        ("http-metrics", "http")
    ]
    pdb = one(objects, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"]


def test_service_monitor() -> None:
    values = load_values(CHART / "ci" / "values-sasl.yaml")
    objects, _ = render(values)
    sm = one(objects, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    svc = next(s for s in by_kind(objects, "Service") if s["metadata"]["name"].endswith("-metrics"))
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    headless = next(s for s in by_kind(objects, "Service") if s["spec"].get("clusterIP") == "None")
    assert (
        not sm["spec"]["selector"]["matchLabels"].items() <= headless["metadata"]["labels"].items()
    )
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] == svc["spec"]["ports"][0]["name"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["interval"] == "15s"


# --- topics hook Job ------------------------------------------------------------------


def test_topics_job_is_a_pre_install_hook(case: tuple[Obj, list[Obj], str]) -> None:
    values, objects, _ = case
    job = one(objects, "Job")
    ann = job["metadata"]["annotations"]
    assert set(ann["helm.sh/hook"].split(",")) == {"pre-install", "pre-upgrade"}
    assert "before-hook-creation" in ann["helm.sh/hook-delete-policy"]
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert "serviceAccountName" not in pod  # the release's account does not exist yet
    (c,) = pod["containers"]
    assert c["args"][:2] == ["topics", "apply"]
    sts_worker = one(objects, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == sts_worker["image"]
    job_env, worker_env = env_dict(c), env_dict(sts_worker)
    if values.get("topics", {}).get("sasl", {}).get("existingSecret"):
        login = {"NDD_SASL_USERNAME", "NDD_SASL_PASSWORD"}  # its own principal
        job_env = {k: v for k, v in job_env.items() if k not in login}
        worker_env = {k: v for k, v in worker_env.items() if k not in login}
    assert job_env == worker_env, "the Job and the workers must see the same topics/Kafka"
    override = values.get("topics", {}).get("override")
    hook_cms = [
        cm
        for cm in by_kind(objects, "ConfigMap")
        if "helm.sh/hook" in cm["metadata"].get("annotations", {})
    ]
    if override:
        assert job_env["NDD_TOPICS_FILE"]["value"] == "/etc/ndd-stream/topics/news.yaml"
        (cm,) = hook_cms
        assert int(cm["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
            ann["helm.sh/hook-weight"]
        ), "the override ConfigMap must exist before the Job"
        assert cm["data"]["news.yaml"].strip() == override.strip()
        vol = next(v for v in pod["volumes"] if v["name"] == "topics")
        assert vol["configMap"]["name"] == cm["metadata"]["name"]
    else:
        assert "NDD_TOPICS_FILE" not in job_env  # definitions bundled in the image
        assert not hook_cms


def test_topics_job_can_be_disabled() -> None:
    objects, notes = render({"topics": {"apply": False}})
    assert not by_kind(objects, "Job")
    assert "topics.apply=false" in notes


# --- settings and credentials ---------------------------------------------------------


def test_env_maps_to_settings(
    case: tuple[Obj, list[Obj], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every NDD_* variable the chart sets is a real setting and parses."""
    values, objects, _ = case
    fields = set(Settings.model_fields)
    for _, pod in pod_specs(objects):
        for c in pod["containers"]:
            env = env_dict(c)
            for name in env:
                assert name.startswith("NDD_"), name
                assert name[4:].lower() in fields, f"{name} is no ndd-stream setting"
            settings = settings_from_env(env, monkeypatch)
            assert str(settings.data_dir) == "/var/lib/ndd-stream"
            assert settings.web_port == 6066
    worker = one(objects, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    settings = settings_from_env(env_dict(worker), monkeypatch)
    for key, value in values.get("config", {}).items():
        field = re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()
        assert getattr(settings, field) == value, key


def test_chart_defaults_match_settings_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """config in values.yaml repeats the Settings defaults; it must not drift from them."""
    config = load_values(CHART / "values.yaml")["config"]
    objects, _ = render()
    worker = one(objects, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    from_chart = settings_from_env(env_dict(worker), monkeypatch)
    for name in list(os.environ):
        if name.startswith("NDD_"):
            monkeypatch.delenv(name)
    defaults = fresh_settings()
    assert config, "values.yaml config is empty"
    for key in config:
        field = re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()
        assert field in Settings.model_fields, key
        assert field not in CHART_OWNED, key
        assert getattr(from_chart, field) == getattr(defaults, field), field


def test_sasl_ssl_credentials_come_from_secrets(case: tuple[Obj, list[Obj], str]) -> None:
    values, objects, _ = case
    kafka = values.get("kafka", {})
    protocol = kafka.get("securityProtocol", "PLAINTEXT")
    for kind, pod in pod_specs(objects):
        (c,) = pod["containers"]
        env = env_dict(c)
        assert env["NDD_SECURITY_PROTOCOL"]["value"] == protocol
        for name, var in env.items():
            if re.search(r"PASSWORD|USERNAME|SECRET|TOKEN|KEY$", name):
                assert "value" not in var, f"{kind}: {name} carries a literal value"
        if protocol.startswith("SASL_"):
            secret = kafka["sasl"]["existingSecret"]
            if kind == "Job":  # the topics Job may log in as a principal of its own
                secret = values.get("topics", {}).get("sasl", {}).get("existingSecret") or secret
            for name, key in (
                ("NDD_SASL_USERNAME", "usernameKey"),
                ("NDD_SASL_PASSWORD", "passwordKey"),
            ):
                ref = env[name]["valueFrom"]["secretKeyRef"]
                assert ref == {"name": secret, "key": kafka["sasl"][key]}, (kind, name)
            assert env["NDD_SASL_MECHANISM"]["value"] == kafka["sasl"]["mechanism"]
        else:
            assert not SECRET_ENV & set(env)
        if protocol.endswith("SSL") and kafka.get("tls", {}).get("caSecret"):
            ca = env["NDD_SSL_CAFILE"]["value"]
            vol = next(v for v in pod["volumes"] if v["name"] == "kafka-ca")
            assert vol["secret"]["secretName"] == kafka["tls"]["caSecret"]
            mount = next(m for m in c["volumeMounts"] if m["name"] == "kafka-ca")
            assert mount["readOnly"] is True
            assert ca == f"{mount['mountPath']}/{kafka['tls']['caKey']}"


def _walk(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{path}[{i}]")
    else:
        yield path, node


@pytest.mark.parametrize("path", [CHART / "values.yaml", *CI_VALUES], ids=lambda p: p.name)
def test_no_secrets_in_values(path: Path) -> None:
    values = load_values(path)
    for where, value in _walk(values):
        leaf = where.rsplit(".", 1)[-1].lower()
        names_a_key = leaf.endswith("key")  # e.g. kafka.sasl.passwordKey: a key *in* a Secret
        if re.search(r"password|passwd|secret_?value|token|private", leaf) and not names_a_key:
            pytest.fail(f"{path.name}: {where} looks like a credential")
        if isinstance(value, str):
            assert "BEGIN" not in value or "PRIVATE KEY" not in value, where
    for env in values.get("extraEnv", []):
        assert env["name"] not in SECRET_ENV or "value" not in env


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"kafka": {"sasl": {"password": "hunter2"}}}, "password"),
        ({"kafka": {"password": "hunter2"}}, "password"),
        ({"config": {"saslPassword": "hunter2"}}, "saslPassword"),
        ({"config": {"sasl_password": "hunter2"}}, "sasl_password"),
        ({"config": {"brokers": "elsewhere:9092"}}, "brokers"),
        ({"kafka": {"securityProtocol": "SASL_SSL"}}, "existingSecret"),
        ({"extraEnv": [{"name": "NDD_SASL_PASSWORD", "value": "hunter2"}]}, "extraEnv"),
        ({"kafka": {"securityProtocol": "TLS"}}, "securityProtocol"),
        ({"view": {"auth": {"password": "hunter2"}}}, "password"),
        ({"config": {"viewPassword": "hunter2"}}, "viewPassword"),
        ({"extraEnv": [{"name": "NDD_VIEW_PASSWORD", "value": "hunter2"}]}, "extraEnv"),
        ({"view": {"auth": {"user": "desk"}}}, "existingSecret"),
    ],
    ids=[
        "sasl-password", "kafka-password", "config-password", "config-snake-password",
        "config-brokers", "sasl-without-secret", "extraenv-literal", "bad-protocol",
        "view-password", "config-view-password", "extraenv-view-literal", "view-user-alone",
    ],
)  # fmt: skip
def test_rejected_values(values: Obj, message: str) -> None:
    with pytest.raises(helm.HelmError) as err:
        render(values)
    assert message in str(err.value)


def test_large_integers_stay_integers(monkeypatch: pytest.MonkeyPatch) -> None:
    objects, _ = render({"config": {"maxItemBytes": 4000000, "scopeMap": {"a": "g"}}})
    worker = one(objects, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    env = env_dict(worker)
    assert env["NDD_MAX_ITEM_BYTES"]["value"] == "4000000"
    settings = settings_from_env(env, monkeypatch)
    assert settings.max_item_bytes == 4_000_000
    assert settings.scope_map == {"a": "g"}


def test_persistence_disabled_uses_empty_dir() -> None:
    objects, notes = render({"persistence": {"enabled": False}})
    spec = one(objects, "StatefulSet")["spec"]
    assert "volumeClaimTemplates" not in spec
    state = next(v for v in spec["template"]["spec"]["volumes"] if v["name"] == "state")
    assert "emptyDir" in state
    assert "rebuilt from Kafka" in notes
    for obj in objects:
        kv.validate(obj, KUBE_VERSION, strict=True)


# --- NOTES ----------------------------------------------------------------------------


def test_notes_explain_scaling(case: tuple[Obj, list[Obj], str]) -> None:
    values, _, notes = case
    partitions = values.get("config", {}).get("partitions", 8)
    shards = values.get("config", {}).get("shards", 1)
    assert f"Keep replicaCount <= {partitions * shards}." in notes
    assert "NDD_PARTITIONS" in notes and "stay idle" in notes
    app_id = values.get("config", {}).get("appId", "ndd-stream")
    assert "rebuilds that partition's window from the changelog" in notes
    assert f"{app_id}-state-changelog" in notes
    assert "docs/STATE.md" in notes  # the measured rebuild cost per 10k documents
    assert "only catches up" in notes  # the PVC keeps a restarted pod's state
    assert "kubectl -n ndd scale statefulset/news-ndd-stream" in notes
    assert "WARNING" not in notes


def test_notes_name_only_real_settings(case: tuple[Obj, list[Obj], str]) -> None:
    """Every config.<key> and NDD_* the NOTES mention is a setting that exists."""
    _, _, notes = case
    fields = set(Settings.model_fields)
    for key in re.findall(r"\bconfig\.([A-Za-z]+)", notes):
        assert re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower() in fields, f"config.{key}"
    for name in re.findall(r"\bNDD_[A-Z_]+", notes):
        assert name[4:].lower() in fields, name


def test_notes_warn_about_idle_pods() -> None:
    _, notes = render({"replicaCount": 10, "config": {"partitions": 4}})
    assert "WARNING: replicaCount (10) is larger than config.partitions (4)" in notes
    assert "6 pod(s) will sit idle" in notes


def test_notes_without_persistence_rebuild_on_restart() -> None:
    _, notes = render({"persistence": {"enabled": False}})
    assert "rebuilds the whole window" in notes
    assert "only catches up" not in notes


# --- sharded windows (config.shards) ---------------------------------------------------


def test_shards_reach_every_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    """config.shards is NDD_SHARDS in the workers, the topics Job (which must create the
    shards topics) and the view (which labels shard partitions), default 1."""
    for values, want in ((None, 1), ({"config": {"shards": 2}}, 2)):
        objects, _ = render(values)
        kinds = []
        for kind, pod in pod_specs(objects):
            (c,) = pod["containers"]
            env = env_dict(c)
            assert env["NDD_SHARDS"] == {"name": "NDD_SHARDS", "value": str(want)}, kind
            assert settings_from_env(env, monkeypatch).shards == want, kind
            kinds.append(kind)
        assert sorted(kinds) == ["Deployment", "Job", "StatefulSet"]


def test_shards_topics_follow_the_release(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Job's environment resolves the shards topics with partitions x shards
    partitions when shards > 1, and none with the default."""
    from ndd_stream.kafka import topics

    definitions = topics.load_definitions(ROOT / "topics")
    for shards, want in ((1, {}), (3, {"shards": 15, "shards_changelog": 15})):
        objects, _ = render({"config": {"partitions": 5, "shards": shards}})
        job = one(objects, "Job")["spec"]["template"]["spec"]["containers"][0]
        resolved, _ = topics.resolve(settings_from_env(env_dict(job), monkeypatch), definitions)
        got = {t.key: t.partitions for t in resolved if t.key.startswith("shards")}
        assert got == want, shards
        assert next(t for t in resolved if t.key == "scoped").partitions == 5


@pytest.mark.parametrize("shards", [0, -1, 65, 1.5, "2"])
def test_schema_rejects_bad_shards(shards: Any) -> None:
    with pytest.raises(helm.HelmError) as err:
        render({"config": {"shards": shards}})
    assert "shards" in str(err.value)


@pytest.mark.parametrize("shards", [1, 64, None])
def test_schema_accepts_shards_in_range(shards: Any) -> None:
    objects, _ = render({"config": {"shards": shards}})
    env = env_dict(one(objects, "StatefulSet")["spec"]["template"]["spec"]["containers"][0])
    assert env.get("NDD_SHARDS", {}).get("value") == (None if shards is None else str(shards))


def test_schema_shards_bounds_are_the_settings_bounds() -> None:
    """values.schema.json accepts exactly what Settings.shards accepts (ge/le)."""
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    prop = schema["properties"]["config"]["properties"]["shards"]
    bounds = {type(m).__name__: m for m in Settings.model_fields["shards"].metadata}
    assert prop["minimum"] == bounds["Ge"].ge
    assert prop["maximum"] == bounds["Le"].le


def _pods_with_state(topic_partitions: dict[str, int], pods: int) -> int:
    """How many of ``pods`` members of one worker group Faust's assignor gives a scoped or
    shard partition (state), for topics of these partition counts, as PartitionAssignor
    does it: topics of equal partition count are one copartitioned group, and each group
    is spread over all members."""
    from faust.assignor.client_assignment import CopartitionedAssignment
    from faust.assignor.copartitioned_assignor import CopartitionedAssignor
    from faust.assignor.partition_assignor import PartitionAssignor

    class Cluster:
        def partitions_for_topic(self, topic: str) -> set[int]:
            return set(range(topic_partitions[topic]))

    members = {f"m{i}": list(topic_partitions) for i in range(pods)}
    groups = PartitionAssignor._get_copartitioned_groups(
        set(topic_partitions), Cluster(), members)
    busy: set[str] = set()
    for count, topic_groups in groups.items():
        for group in topic_groups:
            empty = {m: CopartitionedAssignment(topics=set(group)) for m in members}
            assignment = CopartitionedAssignor(group, empty, count, replicas=0).get_assignment()
            if group & {"scoped", "shards"}:
                busy |= {m for m, a in assignment.items() if a.actives}
    return len(busy)


@pytest.mark.parametrize(("partitions", "shards"), [(8, 1), (8, 2), (4, 3), (1, 4), (16, 1)])
def test_notes_limit_is_what_the_group_deals_out(partitions: int, shards: int) -> None:
    """The replica limit NOTES.txt names is where Faust's assignor starts leaving pods
    without state (no scoped or shard partition; raw topic: the bundled 8 partitions)."""
    _, notes = render({"config": {"partitions": partitions, "shards": shards}})
    found = re.search(r"Keep replicaCount <= (\d+)\.", notes)
    assert found, notes
    limit = int(found[1])
    topic_partitions = {"news.raw": 8, "scoped": partitions}
    if shards > 1:
        topic_partitions["shards"] = partitions * shards
    assert _pods_with_state(topic_partitions, limit) == limit
    assert _pods_with_state(topic_partitions, limit + 1) == limit


def test_notes_with_shards() -> None:
    values = {"replicaCount": 12, "config": {"partitions": 8, "shards": 2, "appId": "wire"}}
    _, notes = render(values)
    assert "WARNING" not in notes, "12 pods fit 8 x 2 shard partitions"
    assert "Keep replicaCount <= 16." in notes
    assert "16 partitions of wire-news.shards" in notes
    assert "wire-shards-changelog" in notes and "rebuilds it from there" in notes
    assert "needs new state (a new config.appId)" in notes
    _, notes = render({**values, "replicaCount": 20})
    assert ("WARNING: replicaCount (20) is larger than config.partitions x config.shards (16)"
            in notes)
    assert "4 pod(s) will sit idle" in notes
    _, notes = render({"config": {"shards": 1}})
    assert "shards" not in notes.lower()


# --- topic definitions in effect ---------------------------------------------------------


def test_topic_definitions_fit_the_release(
    case: tuple[Obj, list[Obj], str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The definitions the Job applies (bundled topics/ or topics.override) load, resolve
    under the release's settings, have enough partitions for the pods, and keep the
    changelog longer than the window."""
    topics = pytest.importorskip("ndd_stream.kafka.topics")
    values, objects, _ = case
    override = values.get("topics", {}).get("override")
    if override:
        path = tmp_path / "news.yaml"
        path.write_text(override, encoding="utf-8")
        # The order of the topics in a file means nothing: compare by key.
        bundled = {t.key: t for t in topics.load_definitions(ROOT / "topics").topics}
        loaded = {t.key: t for t in topics.load_definitions(path).topics}
        assert set(loaded) == set(bundled), (
            "an override replaces the bundled file: it must define every topic "
            f"(missing {sorted(set(bundled) - set(loaded))}, "
            f"unknown {sorted(set(loaded) - set(bundled))})"
        )
        for key, spec in loaded.items():
            for attr in ("name", "role", "setting", "unmanaged_if", "partitions_setting",
                         "partitions_times", "needs_above_one"):
                assert getattr(spec, attr) == getattr(bundled[key], attr), f"{key}.{attr}"
    else:
        path = ROOT / "topics"
    for file in [path] if path.is_file() else sorted(path.glob("*.y*ml")):
        assert_unique_keys(file.read_text(encoding="utf-8"), str(file))
    job = one(objects, "Job")["spec"]["template"]["spec"]["containers"][0]
    settings = settings_from_env(env_dict(job), monkeypatch)
    args = job["args"]
    rf = (
        int(args[args.index("--replication-factor") + 1])
        if "--replication-factor" in args
        else None
    )
    resolved, _ = topics.resolve(settings, topics.load_definitions(path), replication_factor=rf)
    assert resolved
    replicas = values.get("replicaCount", 1)
    # The pods' work: every consumed partition, or with shards at least a shard partition
    # (a pod may then hold no scoped partition and still count).
    dealt = [t for t in resolved if t.role in ("input", "internal")
             and (settings.shards == 1 or t.key in ("shards", "shards_changelog"))]
    assert {t.key for t in dealt} >= ({"shards"} if settings.shards > 1 else {"raw", "scoped"})
    for topic in dealt:
        assert replicas <= topic.partitions, f"{topic.name}: idle pods"
    for topic in resolved:
        if rf:
            assert topic.replication_factor == rf
    changelogs = [t for t in resolved if "changelog" in t.name]
    assert changelogs, "no changelog topic"
    window_ms = settings.window_hours * 3_600_000
    for topic in changelogs:
        assert int(topic.config["retention.ms"]) > window_ms, (
            f"{topic.name} must outlive the {settings.window_hours} h window"
        )
