"""Generate the alert rules and the Grafana dashboard that ship with ndd-stream.

One description of each alert and each panel, written out as:

- ``deploy/alerts.yml``: a plain Prometheus rules file (Docker Compose, any Prometheus);
- ``helm/ndd-stream/templates/prometheusrule.yaml``: the same rules as a prometheus-operator
  PrometheusRule, their thresholds and selectors taken from the release's values;
- ``deploy/grafana/ndd-stream.json`` and ``helm/ndd-stream/dashboards/ndd-stream.json``:
  the dashboard (grafana-foundation-sdk), for Grafana's file provisioning and the chart's
  ConfigMap for the Grafana sidecar.

Why generated: the rules exist twice (plain and templated) and the dashboard's JSON has
ids and grid positions nobody should edit by hand; the tests regenerate every file and
compare it with the committed one, and run the rules through promtool, a real Prometheus
and a real worker. ``rules(timing=...)`` gives the same rules with short durations (the
end-to-end test's copy).

    python tools/make_monitoring.py            # (re)write the files
    python tools/make_monitoring.py --check    # exit 1 if a committed file is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PLAIN_RULES = ROOT / "deploy" / "alerts.yml"
HELM_RULES = ROOT / "helm" / "ndd-stream" / "templates" / "prometheusrule.yaml"
DASHBOARDS = (ROOT / "deploy" / "grafana" / "ndd-stream.json",
              ROOT / "helm" / "ndd-stream" / "dashboards" / "ndd-stream.json")
GROUP = "ndd-stream"
DASHBOARD_UID = "ndd-stream"

#: Aggregation labels: one alert per worker (namespace and pod exist under Kubernetes only).
BY = "namespace, pod, job, instance"
MONITORING = "docs/DEPLOYMENT.md#8-monitoring"


@dataclass(frozen=True)
class Timing:
    """Durations of the rules: ``for`` clauses and range windows."""

    down_for: str = "2m"
    absent_for: str = "10m"
    stall_window: str = "5m"  # decisions counted over this window
    stall_lag_window: str = "30m"  # the last lag reported within it (a hung worker reports none)
    stall_for: str = "5m"
    event_window: str = "15m"  # DLQ records and lost records counted over this window
    restart_window: str = "30m"
    commit_window: str = "5m"
    commit_for: str = "10m"
    ready_for: str = "10m"
    memory_for: str = "10m"


@dataclass(frozen=True)
class Params:
    """What a deployment decides: which targets, and the thresholds (PromQL text)."""

    selector: str = 'job="ndd-stream"'
    lag_threshold: str = "10000"
    lag_for: str = "15m"
    commit_seconds: str = "2"
    partitions: str = "8"
    memory_bytes: str = str(2 << 30)
    memory_ratio: str = "0.85"


#: The chart's values for each parameter (Helm template actions).
HELM_PARAMS = Params(
    selector='job="{{ include "ndd-stream.fullname" . }}-metrics", '
             'namespace="{{ .Release.Namespace }}"',
    lag_threshold="{{ .Values.prometheusRule.lagThreshold }}",
    lag_for="{{ .Values.prometheusRule.lagFor }}",
    commit_seconds="{{ .Values.prometheusRule.commitSeconds }}",
    partitions="{{ .Values.config.partitions | default 8 }}",
    memory_bytes='{{ include "ndd-stream.bytes" .Values.resources.limits.memory }}',
    memory_ratio="{{ .Values.prometheusRule.memoryRatio }}",
)

#: Rules the chart renders only under a condition (Helm), by alert name.
HELM_CONDITIONS = {
    # the worker's ndd_assigned_partitions counts one pool's partitions; with sharded
    # windows two pools set it
    "NddPartitionsNotReady": "eq (int (.Values.config.shards | default 1)) 1",
    "NddMemoryNearLimit": "(.Values.resources.limits).memory",
}


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    duration: str
    severity: str
    summary: str
    description: str
    doc: str  # the docs section that says what to do

    def as_dict(self) -> dict[str, Any]:
        rule: dict[str, Any] = {"alert": self.name, "expr": self.expr}
        if self.duration != "0s":
            rule["for"] = self.duration
        rule["labels"] = {"severity": self.severity}
        rule["annotations"] = {"summary": self.summary,
                               "description": f"{self.description} See {self.doc}.",
                               "runbook": self.doc}  # a path in the repository
        return rule


def _new_or_growing(metric: str, window: str) -> str:
    """Counter series that grew within ``window``, or appeared within it: a labelled
    counter's series starts at its first increment, which ``increase`` alone never sees."""
    return (f"(increase({metric}[{window}]) > 0)\n"
            f"  or ({metric} unless {metric} offset {window})")


def alerts(params: Params = Params(), timing: Timing = Timing()) -> list[Alert]:
    """Every alert, in the order of docs/DEPLOYMENT.md's table."""
    s, t = params.selector, timing
    return [
        Alert(
            "NddWorkerDown", f"up{{{s}}} == 0", t.down_for, "critical",
            "ndd-stream worker {{ $labels.instance }} is down or not answering /metrics",
            "Prometheus has not scraped {{ $labels.instance }} for " + t.down_for + ": the "
            "process is gone, hung (its event loop blocked) or unreachable. Its partitions "
            "move to the other workers only after the consumer session times out. Read the "
            "pod's events and the end of its log; a hung worker is restarted by its "
            "liveness probe.", MONITORING),
        Alert(
            "NddWorkerTargetsMissing", f"absent(up{{{s}}})", t.absent_for, "warning",
            "Prometheus scrapes no ndd-stream worker",
            "No target matches " + s + ": the workers are not deployed, "
            "or Prometheus does not discover them (the ServiceMonitor's labels do not match "
            "the Prometheus' serviceMonitorSelector), so no other alert can fire.",
            MONITORING),
        Alert(
            "NddDecisionsStalled",
            f"(max by ({BY}) (last_over_time(ndd_consumer_lag{{{s}}}[{t.stall_lag_window}]))"
            " > 0)\n"
            f"unless on ({BY})\n"
            f"(sum by ({BY}) (increase(ndd_items_total{{{s}}}[{t.stall_window}])) > 0)",
            t.stall_for, "critical",
            "ndd-stream worker {{ $labels.instance }} decides nothing while input waits",
            "{{ $labels.instance }} last reported {{ $value }} records waiting and has "
            "decided none for " + t.stall_window + ". Is the worker answering (see "
            "NddWorkerDown), can it reach the broker (its log: broker_unreachable), is a "
            "partition still being restored (partition_ready)? Restart the pod if it stays "
            "stuck: it resumes from its committed state.", MONITORING),
        Alert(
            "NddConsumerLagHigh",
            f"max by ({BY}, topic, partition) (ndd_consumer_lag{{{s}}}) > "
            f"{params.lag_threshold}",
            params.lag_for, "warning",
            "ndd-stream is {{ $value }} records behind on {{ $labels.topic }}"
            "[{{ $labels.partition }}]",
            "Input arrives faster than {{ $labels.instance }} decides it. Add workers (up "
            "to the scoped topic's partitions), or partitions or shards for one busy scope.",
            "docs/DEPLOYMENT.md#4-scaling-by-partitions"),
        Alert(
            "NddDeadLetters",
            f"sum by ({BY}, reason, stage) (\n  "
            + _new_or_growing(f"ndd_dlq_total{{{s}}}", t.event_window) + "\n)",
            "0s", "warning",
            "ndd-stream sends items to the dead-letter topic ({{ $labels.reason }}, "
            "{{ $labels.stage }})",
            "{{ $value | printf \"%.0f\" }} items in " + t.event_window + " could not be "
            "decided (not JSON, too large, no text, ...) and went to the dead-letter topic "
            "with the reason in a header; the others are decided as usual. Look at them "
            "(ndd-stream view, or the DLQ topic) and fix their producer.",
            "docs/RELIABILITY.md#bad-input"),
        Alert(
            "NddRecordsLost",
            f"sum by ({BY}, topic, partition) (\n  "
            + _new_or_growing(f"ndd_lost_records_total{{{s}}}", t.event_window) + "\n)",
            "0s", "critical",
            "Records of {{ $labels.topic }}[{{ $labels.partition }}] were removed before "
            "ndd-stream read them",
            "{{ $value | printf \"%.0f\" }} records in " + t.event_window + ": the broker "
            "deleted input (retention, deleted records, a truncated log) before "
            "any worker decided it; those items were never decided. The worker's "
            "ERROR line (records_lost) names the offsets. Give the raw topic a longer "
            "retention than the longest outage or backlog.",
            "docs/RELIABILITY.md#records-removed-before-they-were-read"),
        Alert(
            "NddWorkerRestarting",
            f"changes(process_start_time_seconds{{{s}}}[{t.restart_window}]) >= 2",
            "0s", "warning",
            "ndd-stream worker {{ $labels.instance }} restarted {{ $value }} times in "
            + t.restart_window,
            "The worker exits on what it cannot ride out: a broker gone longer than "
            "NDD_BROKER_TIMEOUT_S, a permission refused, lost data, or a crash, and "
            "restarts from its committed state. Its last log lines before each restart "
            "name the cause.",
            "docs/RELIABILITY.md#exactly-once-ndd_guarantee-apache-kafka"),
        Alert(
            "NddTransactionsFailing",
            f"sum by ({BY}, kind) (\n  "
            f"(increase(ndd_transaction_failures_total{{{s}}}[{t.event_window}]) > 0)\n  or "
            f"(ndd_transaction_failures_total{{{s}}} unless "
            f"ndd_transaction_failures_total{{{s}}} offset {t.event_window})\n) >= 3",
            "0s", "warning",
            "{{ $value | printf \"%.0f\" }} transactions failed ({{ $labels.kind }}) on "
            "{{ $labels.instance }} in " + t.event_window,
            "A failed transaction commits nothing: its partitions are opened again and "
            "the work redone (TransactionAborted), or its partitions are left to the "
            "rebalance, the commit refused to a past member of the consumer group "
            "(ProducerFenced). A few during a leader election or a rebalance are "
            "routine; many mean brokers or the transaction coordinator in trouble. The "
            "worker's transaction_aborted and fenced lines say which partitions.",
            "docs/RELIABILITY.md#a-clusters-routine-events-three-brokers"),
        Alert(
            "NddTransactionCommitsSlow",
            "histogram_quantile(0.99,\n"
            f"  sum by ({BY}, le) (rate(ndd_transaction_commit_seconds_bucket{{{s}}}"
            f"[{t.commit_window}]))\n) > {params.commit_seconds}",
            t.commit_for, "warning",
            "ndd-stream transaction commits take {{ $value | humanizeDuration }} (p99) on "
            "{{ $labels.instance }}",
            "Each piece of work waits for its transaction commit, so slow commits slow "
            "every decision. Look at the brokers (under-replicated partitions, "
            "min.insync.replicas, disks) and at the transaction coordinator.",
            "docs/RELIABILITY.md#broker-trouble"),
        Alert(
            "NddPartitionsNotReady",
            f"sum by (namespace, job) (ndd_assigned_partitions{{{s}}}) < {params.partitions}",
            t.ready_for, "warning",
            "Only {{ $value }} of " + params.partitions + " ndd-stream partitions are ready",
            "A partition is ready once its window is restored (local RocksDB, then the "
            "changelog). A restore taking this long means a large window rebuilt from the "
            "changelog (a new or emptied volume), a slow broker, or a missing worker.",
            "docs/STATE.md#cost-of-rebuilding"),
        Alert(
            "NddMemoryNearLimit",
            f"max by ({BY}) (process_resident_memory_bytes{{{s}}}) > "
            f"{params.memory_ratio} * {params.memory_bytes}",
            t.memory_for, "warning",
            "ndd-stream worker {{ $labels.instance }} uses {{ $value | humanize1024 }}B, "
            "near its memory limit",
            "The window's documents (ndd_window_documents) grow with input and window "
            "hours. Raise the memory limit, spread the partitions over more workers, or "
            "shorten the window before the container is killed.", "docs/DEPLOYMENT.md#6-sizing"),
    ]


def rules(params: Params = Params(), timing: Timing = Timing()) -> dict[str, Any]:
    """A Prometheus rules file (``rule_files``), as data."""
    return {"groups": [{"name": GROUP, "rules": [a.as_dict() for a in alerts(params, timing)]}]}


# --- YAML text: block scalars, so PromQL and Go templates need no quoting ----------------


def _scalar(value: str, indent: str) -> str:
    if "\n" in value or len(value) > 60 or any(c in value for c in ":{}[]#\"'&*!|>%@`"):
        lines = "\n".join(f"{indent}  {line}" for line in value.split("\n"))
        return f"|-\n{lines}"
    return value


def _rule_lines(rule: dict[str, Any], indent: str) -> Iterator[str]:
    first = True
    for key, value in rule.items():
        lead = f"{indent}- " if first else f"{indent}  "
        first = False
        if isinstance(value, dict):
            yield f"{lead}{key}:"
            for k, v in value.items():
                yield f"{indent}    {k}: {_scalar(v, indent + '    ')}"
        else:
            yield f"{lead}{key}: {_scalar(value, indent + '  ')}"


def plain_rules_text() -> str:
    """deploy/alerts.yml."""
    lines = [
        "# ndd-stream alert rules for Prometheus (rule_files). Generated by",
        "# tools/make_monitoring.py: edit that file, not this one. The Helm chart renders",
        "# the same rules as a PrometheusRule (prometheusRule.enabled). Each alert is",
        f"# explained in {MONITORING}.",
        "#",
        "# Thresholds here: consumer lag 10000 records for 15m, p99 commit 2 s, 8 scoped",
        "# partitions (NDD_PARTITIONS), a 2 GiB memory limit per worker; change them to",
        "# match your deployment, and job=\"ndd-stream\" to your scrape job's name.",
        "groups:",
        f"  - name: {GROUP}",
        "    rules:",
    ]
    for rule in rules()["groups"][0]["rules"]:
        lines.extend(_rule_lines(rule, "      "))
    return "\n".join(lines) + "\n"


def _helm_escape(text: str) -> str:
    """Prometheus' own templates ({{ $labels.x }}) kept literal through Helm."""
    return text.replace("{{", '{{ "{{" }}')


def helm_rules_text() -> str:
    """helm/ndd-stream/templates/prometheusrule.yaml."""
    plain = alerts(Params(selector="@SELECTOR@", lag_threshold="@LAG@", lag_for="@LAG_FOR@",
                          commit_seconds="@COMMIT@", partitions="@PARTITIONS@",
                          memory_bytes="@MEMORY@", memory_ratio="@RATIO@"))
    substitutions = {
        "@SELECTOR@": HELM_PARAMS.selector, "@LAG@": HELM_PARAMS.lag_threshold,
        "@LAG_FOR@": HELM_PARAMS.lag_for, "@COMMIT@": HELM_PARAMS.commit_seconds,
        "@PARTITIONS@": HELM_PARAMS.partitions, "@MEMORY@": HELM_PARAMS.memory_bytes,
        "@RATIO@": HELM_PARAMS.memory_ratio,
    }
    lines = [
        "{{- /* Generated by tools/make_monitoring.py from the same alerts as",
        "       deploy/alerts.yml: edit that file, not this one. */ -}}",
        "{{- if .Values.prometheusRule.enabled }}",
        "apiVersion: monitoring.coreos.com/v1",
        "kind: PrometheusRule",
        "metadata:",
        '  name: {{ include "ndd-stream.fullname" . }}',
        "  labels:",
        '    {{- include "ndd-stream.labels" . | nindent 4 }}',
        "    {{- with .Values.prometheusRule.labels }}",
        "    {{- toYaml . | nindent 4 }}",
        "    {{- end }}",
        "spec:",
        "  groups:",
        f"    - name: {GROUP}",
        "      rules:",
    ]
    for alert in plain:
        rule_text = "\n".join(_rule_lines(alert.as_dict(), "        "))
        rule_text = _helm_escape(rule_text)
        for placeholder, action in substitutions.items():
            rule_text = rule_text.replace(placeholder, action)
        condition = HELM_CONDITIONS.get(alert.name)
        if condition:
            lines.append(f"        {{{{- if {condition} }}}}")
        lines.append(rule_text)
        if condition:
            lines.append("        {{- end }}")
    lines.append("{{- end }}")
    return "\n".join(lines) + "\n"


# --- the dashboard ------------------------------------------------------------------------

#: One row of docs/DEPLOYMENT.md's panel table per panel: (title, what it shows).
PANELS: list[tuple[str, str]] = []


def dashboard() -> dict[str, Any]:
    """The Grafana dashboard as JSON data (grafana-foundation-sdk)."""
    from grafana_foundation_sdk.builders import (
        dashboard as dash,
    )
    from grafana_foundation_sdk.builders import (
        prometheus,
        stat,
        statetimeline,
        timeseries,
    )
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.common import (
        GraphDrawStyle,
        LegendDisplayMode,
        StackingMode,
        VisibilityMode,
    )
    from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableRefresh

    ds = DataSourceRef(type_val="prometheus", uid="${datasource}")
    sel = 'job=~"$job", instance=~"$instance"'

    def query(expr: str, legend: str, ref: str = "A") -> prometheus.Dataquery:
        return (prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref)
                .range())

    def series(title: str, description: str, unit: str, *queries: prometheus.Dataquery,
               stacked: bool = False, width: int = 12) -> timeseries.Panel:
        panel = (timeseries.Panel().title(title).description(description).unit(unit)
                 .datasource(ds).height(8).span(width).fill_opacity(10)
                 .draw_style(GraphDrawStyle.LINE).show_points(VisibilityMode.NEVER)
                 .legend(_legend(LegendDisplayMode.LIST)))
        if stacked:
            panel = panel.stacking(_stacking(StackingMode.NORMAL))
        for q in queries:
            panel = panel.with_target(q)
        return panel

    def _legend(mode: LegendDisplayMode) -> Any:
        from grafana_foundation_sdk.builders.common import VizLegendOptions
        return VizLegendOptions().display_mode(mode).show_legend(True)

    def _stacking(mode: StackingMode) -> Any:
        from grafana_foundation_sdk.builders.common import StackingConfig
        return StackingConfig().mode(mode)

    def stat_panel(title: str, description: str, unit: str, expr: str,
                   width: int = 6) -> stat.Panel:
        return (stat.Panel().title(title).description(description).unit(unit).datasource(ds)
                .height(4).span(width).with_target(query(expr, "")))

    panels: list[tuple[Any, str]] = [
        (stat_panel("Workers up", "Workers Prometheus scrapes (up == 1).", "short",
                    f"sum(up{{{sel}}})"),
         "workers scraped (up)"),
        (stat_panel("Decisions / s", "Items decided per second, all routes.", "ops",
                    f"sum(rate(ndd_items_total{{{sel}}}[$__rate_interval]))"),
         "items decided per second"),
        (stat_panel("Records behind", "Sum of the consumer lag of every partition.", "short",
                    f"sum(ndd_consumer_lag{{{sel}}})"),
         "total consumer lag"),
        (stat_panel("Partitions ready", "Scoped partitions with their window restored.",
                    "short", f"sum(ndd_assigned_partitions{{{sel}}})"),
         "ready partitions (ndd_assigned_partitions)"),
        (series("Throughput by route", "Items decided per second by status "
                "(unique, near_duplicate, exact_duplicate) and items sent to the dead-letter "
                "topic.", "ops",
                query(f"sum by (status) (rate(ndd_items_total{{{sel}}}[$__rate_interval]))",
                      "{{status}}"),
                query(f"sum(rate(ndd_dlq_total{{{sel}}}[$__rate_interval]))", "dlq", "B"),
                stacked=True),
         "decisions per second by status, and DLQ records"),
        (series("Consumer lag per partition", "Records behind the partition end, as the "
                "worker last saw it.", "short",
                query(f"max by (topic, partition) (ndd_consumer_lag{{{sel}}})",
                      "{{topic}}[{{partition}}]")),
         "ndd_consumer_lag by topic and partition"),
        (series("Decision latency", "Time to decide one item (parse + detect): quantiles.",
                "s",
                *[query(f"histogram_quantile({q}, sum by (le) (rate("
                        f"ndd_decision_seconds_bucket{{{sel}}}[$__rate_interval])))",
                        f"p{round(q * 100)}", ref)
                  for q, ref in ((0.5, "A"), (0.9, "B"), (0.99, "C"))]),
         "p50, p90, p99 of ndd_decision_seconds"),
        (series("Dead letters by reason", "Items sent to the dead-letter topic per second.",
                "ops", query(f"sum by (reason, stage) (rate(ndd_dlq_total{{{sel}}}"
                             "[$__rate_interval]))", "{{reason}} ({{stage}})")),
         "ndd_dlq_total rate by reason"),
        (series("Window documents", "Documents in each partition's window.", "short",
                query(f"sum by (partition) (ndd_window_documents{{{sel}}})",
                      "{{partition}}")),
         "ndd_window_documents by partition"),
        (series("State on disk", "RocksDB state size per partition.", "bytes",
                query(f"sum by (partition) (ndd_state_bytes{{{sel}}})", "{{partition}}")),
         "ndd_state_bytes by partition"),
        (series("Transaction commits", "Commit time of each piece's transactions "
                "(exactly-once) and commits per second.", "s",
                query("histogram_quantile(0.99, sum by (le) (rate("
                      f"ndd_transaction_commit_seconds_bucket{{{sel}}}[$__rate_interval])))",
                      "p99"),
                query("histogram_quantile(0.5, sum by (le) (rate("
                      f"ndd_transaction_commit_seconds_bucket{{{sel}}}[$__rate_interval])))",
                      "p50", "B")),
         "p50 and p99 of ndd_transaction_commit_seconds"),
        (series("Restores", "Documents rebuilt per second, from local state or the "
                "changelog, and worker restarts.", "short",
                query(f"sum by (source) (rate(ndd_restored_documents_total{{{sel}}}"
                      "[$__rate_interval]))", "{{source}}"),
                query(f"sum(changes(process_start_time_seconds{{{sel}}}[$__rate_interval]))",
                      "restarts", "B")),
         "ndd_restored_documents_total rate by source, restarts"),
        (series("Memory", "Resident memory of each worker.", "bytes",
                query(f"process_resident_memory_bytes{{{sel}}}", "{{instance}}")),
         "process_resident_memory_bytes per worker"),
        (series("Lost records", "Input records the broker removed before a worker read "
                "them.", "short",
                query(f"sum by (topic, partition) (increase(ndd_lost_records_total{{{sel}}}"
                      "[$__rate_interval]))", "{{topic}}[{{partition}}]")),
         "ndd_lost_records_total increase by partition"),
        # ALERTS: Prometheus' own series of pending and firing alerts, so the panel works
        # with any Grafana alerting setup
        (statetimeline.Panel().title("Alerts").description(
            "ndd-stream's alerts: pending or firing, per alert and worker.")
         .datasource(ds).height(8).span(24).show_value(VisibilityMode.NEVER)
         .with_target(query('max by (alertname, instance, alertstate) (ALERTS{'
                            'alertname=~"Ndd.*"})',
                            "{{alertname}} {{instance}} ({{alertstate}})")),
         "Ndd* alerts pending or firing (Prometheus' ALERTS series)"),
    ]
    PANELS[:] = [(_title(p), text) for p, text in panels]

    builder = (
        dash.Dashboard("ndd-stream").uid(DASHBOARD_UID).tags(["ndd-stream", "kafka"])
        .description("ndd-stream workers: throughput, lag, latency, window, transactions, "
                     "restores and alerts. Generated by tools/make_monitoring.py.")
        .refresh("30s").time("now-3h", "now").timezone("browser").editable()
        .with_variable(dash.DatasourceVariable("datasource").label("Data source")
                       .type("prometheus"))
        .with_variable(dash.QueryVariable("job").label("Job").datasource(ds)
                       .query("label_values(ndd_assigned_partitions, job)")
                       .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
                       .include_all(True).multi(True).all_value(".*"))
        .with_variable(dash.QueryVariable("instance").label("Worker").datasource(ds)
                       .query('label_values(ndd_assigned_partitions{job=~"$job"}, instance)')
                       .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
                       .include_all(True).multi(True).all_value(".*"))
    )
    # ids in panel order: stable links (?viewPanel=N) across regenerations
    for number, (panel, _) in enumerate(panels, start=1):
        builder = builder.with_panel(panel.id(number))
    data: dict[str, Any] = json.loads(JSONEncoder(sort_keys=True, indent=2)
                                      .encode(builder.build()))
    return data


def _title(panel: Any) -> str:
    return str(panel.build().title)


def dashboard_text() -> str:
    return json.dumps(dashboard(), indent=2, sort_keys=True) + "\n"


def generated() -> dict[Path, str]:
    """Every generated file and its text."""
    text = dashboard_text()
    return {PLAIN_RULES: plain_rules_text(), HELM_RULES: helm_rules_text(),
            **{path: text for path in DASHBOARDS}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if a committed file differs from what this writes")
    args = parser.parse_args(argv)
    stale = []
    for path, text in generated().items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(str(path.relative_to(ROOT)))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print("stale (run python tools/make_monitoring.py): " + ", ".join(stale),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
