"""The Grafana dashboard queries only metrics and labels the operator really exports
(gpu_sizer.metrics), and covers what the issue asks it to show."""

from __future__ import annotations

import json
import re
from typing import Any

from prometheus_client.metrics import MetricWrapperBase

from gpu_sizer import metrics

from .conftest import CHART

DASHBOARD = json.loads((CHART / "dashboards" / "gpu-sizer.json").read_text())

# Series names prometheus-client exposes for each metric type.
SUFFIXES = {
    "gauge": [""],
    "counter": ["_total", "_created"],
    "histogram": ["_bucket", "_sum", "_count", "_created"],
    "summary": ["", "_sum", "_count", "_created"],
}
# Labels Prometheus adds itself or that histograms carry.
IMPLICIT_LABELS = {"le", "job", "instance", "namespace_", "__name__"}


def exported() -> dict[str, set[str]]:
    """Series name -> label names, from the collectors gpu_sizer.metrics defines."""
    series: dict[str, set[str]] = {}
    for attr in metrics.__all__:
        collector = getattr(metrics, attr)
        if isinstance(collector, metrics.WorkloadGauges):
            # One custom collector for the per-workload gauges: its families say their labels.
            for family in collector.describe():
                series[family.name] = set(family._labelnames)  # type: ignore[attr-defined]
            continue
        if not isinstance(collector, MetricWrapperBase):
            continue
        # prometheus-client keeps these on the wrapper; there is no public accessor.
        name, kind, labels = collector._name, collector._type, set(collector._labelnames)
        for suffix in SUFFIXES[kind]:
            series[f"{name}{suffix}"] = labels
    return series


def queries(node: Any) -> list[str]:
    """Every PromQL expression in the dashboard, template variable queries included."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in {"expr", "definition"} and isinstance(value, str):
                found.append(value)
            else:
                found.extend(queries(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(queries(item))
    return found


SELECTOR = re.compile(r"(gpusizer_[a-z_]+)\s*(\{[^}]*\})?")
GROUPING = re.compile(r"\b(?:by|on|without|ignoring)\s*\(([^)]*)\)")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")


def test_dashboard_queries_only_exported_metrics_and_labels() -> None:
    series = exported()
    exprs = queries(DASHBOARD)
    assert len(exprs) >= 10
    used: set[str] = set()
    for expr in exprs:
        names = SELECTOR.findall(expr)
        assert names, f"query uses no gpu-sizer metric: {expr}"
        labels_in_expr: set[str] = set()
        for name, selector in names:
            assert name in series, f"{name} is not exported by gpu_sizer.metrics ({expr})"
            used.add(name)
            for label in MATCHER.findall(selector or ""):
                assert label in series[name], f"{name} has no label {label!r} ({expr})"
            labels_in_expr |= series[name]
        for group in GROUPING.findall(expr):
            for label in filter(None, (g.strip() for g in group.split(","))):
                assert label in labels_in_expr | IMPLICIT_LABELS, f"unknown label {label} ({expr})"
        for var_label in re.findall(r"label_values\([^,]+,\s*([a-z_]+)\)", expr):
            assert var_label in labels_in_expr, expr


def test_dashboard_shows_what_the_issue_asks_for() -> None:
    exprs = " ".join(queries(DASHBOARD))
    for name in (
        "gpusizer_estimated_bytes",  # estimated per workload
        "gpusizer_measured_peak_bytes",  # measured per workload
        "gpusizer_recommendation_headroom_fraction",  # headroom
        "gpusizer_measurement_duration_seconds_bucket",  # measurement durations
        "gpusizer_admission_verdicts_total",  # admission verdicts
    ):
        assert name in exprs, name


def test_dashboard_is_importable_json_with_unique_panel_ids() -> None:
    assert DASHBOARD["uid"] and DASHBOARD["title"]
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))
    for panel in DASHBOARD["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
