"""The three outputs of a run: ``report.json``, ``report.md`` (seed 003 Table 2 style) and
``f1_vs_threshold.png`` (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import orjson

from ndd_stream.eval.metrics import Confusion
from ndd_stream.eval.runner import EvalResult, MethodResult

STRING_MEASURES = {"levenshtein", "smith-waterman", "rank-distance", "levenshtein-title"}


def _conf(c: Confusion) -> dict[str, float | int]:
    return c.as_dict()


def to_json(result: EvalResult) -> dict[str, Any]:
    cfg = result.config
    return {
        "config": {
            "corpus": str(cfg.corpus),
            "methods": list(cfg.methods),
            "thresholds": list(cfg.thresholds),
            "extract": cfg.extract,
            "order": cfg.order,
            "seed": cfg.seed,
            "window_hours": cfg.window_hours,
            "ddd_threshold": cfg.ddd_threshold,
        },
        "corpus": {
            "name": result.corpus.name,
            "items": result.n_items,
            "clusters": result.n_clusters,
            "pairs": result.n_pairs,
            "duplicate_pairs": result.n_positive_pairs,
            "expected_duplicate_routings": result.n_expected_duplicates,
            "skipped": [{"source": s.source, "reason": s.reason} for s in result.corpus.skipped],
            "extraction_ms_per_html_page": round(result.extraction_ms_per_page, 3),
            "extraction_failures": [
                {"source": s, "error": e} for s, e in result.extraction_failures
            ],
        },
        "methods": [_method_json(m) for m in result.methods],
        "total_seconds": round(result.total_seconds, 3),
    }


def _method_json(m: MethodResult) -> dict[str, Any]:
    return {
        "name": m.name,
        "reference": m.reference,
        "parameters": m.parameters,
        "binary": m.binary,
        "runtime_ms": round(m.runtime_ms, 1),
        "compared_pairs": m.compared_pairs,
        "notes": m.notes,
        "pairwise": {
            "best_threshold": m.best_threshold,
            "best": _conf(m.best),
            "sweep": [{"threshold": t, **_conf(c)} for t, c in m.sweep],
            "adjusted_rand_index": round(m.ari_pairwise, 6),
        },
        "routing": {
            "best_threshold": m.routing_threshold,
            "best": _conf(m.routing),
            "sweep": [{"threshold": t, **_conf(c)} for t, c in m.routing_sweep],
            "adjusted_rand_index": round(m.ari_routing, 6),
            "detector": m.detector,
        },
        **({"stories": m.stories} if m.stories is not None else {}),
    }


def _thr(t: float | None) -> str:
    return "n/a (binary)" if t is None else f"{t:.2f}"


def to_markdown(result: EvalResult) -> str:
    """Tables in the style of seed 003's Table 2, plus routing and notes."""
    cfg = result.config
    lines = [
        f"# ndd-stream eval: {result.corpus.name}",
        "",
        f"{result.n_items} items in {result.n_clusters} clusters, {result.n_pairs} pairs "
        f"({result.n_positive_pairs} duplicate pairs); extraction `{cfg.extract}` "
        f"({result.extraction_ms_per_page:.2f} ms per HTML page); stream order `{cfg.order}`"
        f" (seed {cfg.seed}), window {cfg.window_hours} h. "
        f"Skipped files: {len(result.corpus.skipped)}. "
        f"Total run time {result.total_seconds:.1f} s.",
        "",
        "## Pairwise (best F1 over the threshold sweep)",
        "",
        "| Method | Prec. | Rec. | Max F1 | Threshold | Runtime (ms) | ARI |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for m in result.methods:
        lines.append(
            f"| {m.name} | {m.best.precision:.3f} | {m.best.recall:.3f} | {m.best.f1:.3f} | "
            f"{_thr(m.best_threshold)} | {m.runtime_ms:.0f} | {m.ari_pairwise:.3f} |"
        )
    lines += [
        "",
        "## Streaming routing (first of a cluster unique, the rest duplicates of their own "
        "cluster)",
        "",
        "| Method | Prec. | Rec. | F1 | Threshold | ARI |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for m in result.methods:
        lines.append(
            f"| {m.name} | {m.routing.precision:.3f} | {m.routing.recall:.3f} | "
            f"{m.routing.f1:.3f} | {_thr(m.routing_threshold)} | {m.ari_routing:.3f} |"
        )
    ddd = [m for m in result.methods if m.detector]
    if ddd:
        lines += [
            "",
            "## DDD through the core Detector",
            "",
            "| Threshold | Prec. | Rec. | F1 | ms/decision | agreement with replay |",
            "|---:|---:|---:|---:|---:|---:|",
        ]
        for check in ddd[0].detector:
            r = check["routing"]
            lines.append(
                f"| {check['threshold']:.2f} | {r['precision']:.3f} | {r['recall']:.3f} | "
                f"{r['f1']:.3f} | {check['ms_per_decision']:.2f} | "
                f"{check['agreement_with_replay']:.4f} |"
            )
    for m in result.methods:
        st = m.stories
        if st is None:
            continue
        pairs = st["pairwise"]
        lines += [
            "",
            f"## Story groups of the stream ({m.name} at {st['threshold']:.2f})",
            "",
            "| Groups | Clusters | ARI | same story: Prec. | Rec. | F1 | routing tree: groups "
            "| ARI |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|",
            f"| {st['groups']} | {st['clusters']} | {st['adjusted_rand_index']:.3f} | "
            f"{pairs['precision']:.3f} | {pairs['recall']:.3f} | {pairs['f1']:.3f} | "
            f"{st['tree_groups']} | {st['tree_adjusted_rand_index']:.3f} |",
        ]
    lines += ["", "## Notes", ""]
    for m in result.methods:
        extra = "; ".join(m.notes)
        costly = (
            " Costly per pair: used as a verifier on candidates."
            if (m.name in STRING_MEASURES)
            else ""
        )
        lines.append(
            f"- **{m.name}**: {m.reference}. Scored pairs: {m.compared_pairs}.{costly}"
            + (f" {extra}." if extra else "")
        )
    if result.corpus.skipped:
        lines += ["", "## Skipped files", ""]
        lines += [f"- `{s.source}`: {s.reason}" for s in result.corpus.skipped]
    return "\n".join(lines) + "\n"


def plot(result: EvalResult, path: Path) -> None:
    """F1 vs threshold, pairwise and routing, one line per method (binary: one marker)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5), sharey=True)
    cmap = plt.get_cmap("tab20")
    for k, m in enumerate(result.methods):
        color = cmap(k % 20)
        for ax, sweep in ((axes[0], m.sweep), (axes[1], m.routing_sweep)):
            if m.binary:
                ax.axhline(sweep[0][1].f1, color=color, linestyle=":", label=m.name)
            else:
                ax.plot(
                    [t for t, _ in sweep],
                    [c.f1 for _, c in sweep],
                    marker=".",
                    color=color,
                    label=m.name,
                )
    axes[0].set_title("Pairwise F1 vs threshold")
    axes[1].set_title("Streaming routing F1 vs threshold")
    for ax in axes:
        ax.set_xlabel("similarity threshold")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("F1")
    axes[1].legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=8)
    fig.suptitle(f"{result.corpus.name}: extraction '{result.config.extract}'")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def can_plot() -> bool:
    """matplotlib comes with the ``eval`` extra; without it the reports have no plot."""
    return importlib.util.find_spec("matplotlib") is not None


def write_reports(result: EvalResult, out_dir: Path) -> dict[str, Path]:
    """Write report.json, report.md and (with matplotlib) f1_vs_threshold.png."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out_dir / "report.json",
        "markdown": out_dir / "report.md",
        "plot": out_dir / "f1_vs_threshold.png",
    }
    paths["json"].write_bytes(orjson.dumps(to_json(result), option=orjson.OPT_INDENT_2))
    paths["markdown"].write_text(to_markdown(result), encoding="utf-8")
    if can_plot():
        plot(result, paths["plot"])
    else:
        del paths["plot"]
    return paths
