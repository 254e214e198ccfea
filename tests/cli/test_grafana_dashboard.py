"""deploy/grafana/shardq.json is built on what `shardq serve --http`
exports: every metric named in its panel queries and template variables is
on a live coordinator's /metrics."""
import json
import re
import time
import urllib.request

from cli_helpers import REPO, make_text_files, run
from test_observability import http_port, parse_exposition

DASHBOARD = REPO / "deploy" / "grafana" / "shardq.json"
# PromQL words that are not metric names.
PROMQL = {"rate", "irate", "increase", "sum", "avg", "min", "max", "count", "topk", "bottomk",
          "by", "without", "histogram_quantile", "label_values", "on", "ignoring", "and", "or",
          "unless", "offset", "bool"}


def queries(dashboard):
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            yield panel["title"], target["expr"]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            yield f"variable {var['name']}", var["query"]["query"]


def metric_names(expr):
    """The metric names an expression reads: identifiers outside label
    matchers {...}, grouping clauses by (...) and range selectors [...]."""
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r'"[^"]*"', "", expr)
    # label_values(metric, label): the label is not a metric.
    expr = re.sub(r"label_values\(\s*(\w+)\s*,\s*\w+\s*\)", r"\1", expr)
    names = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr)) - PROMQL
    return {n for n in names if not re.fullmatch(r"\d+(e\d+)?", n)}


def test_metric_names_are_read_from_promql():
    assert metric_names('histogram_quantile(0.99, sum by (le) (rate(a_bucket{q=~"$q"}[5m])))') \
        == {"a_bucket"}
    assert metric_names("rate(x_total[1m]) / rate(y_total[1m])") == {"x_total", "y_total"}
    assert metric_names("label_values(shardq_items_pending, queue)") == {"shardq_items_pending"}


def test_every_metric_the_dashboard_queries_is_exported(start_coordinator, tmp_path):
    dashboard = json.loads(DASHBOARD.read_text())
    c = start_coordinator("--http", "127.0.0.1:0", "--state-dir", str(tmp_path / "state"))
    run("create", "--address", c.address, "--name", "dash", "--slices", "4",
        *make_text_files(tmp_path, 2, 5))
    run("worker", "--address", c.address, "--name", "dash", "--worker", "w-1", "--", "true")
    port = http_port(tmp_path / "serve.log")
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    samples, types = parse_exposition(text)
    exported = {name for name, _ in samples}
    checked = set()
    for where, expr in queries(dashboard):
        names = metric_names(expr)
        assert names, f"{where}: no metric in {expr!r}"
        missing = names - exported
        assert not missing, f"{where}: {expr!r} names {missing}, not exported"
        checked |= names
    # The dashboard covers the families the issue names.
    for name in ("shardq_items_completed_total", "shardq_take_duration_seconds_bucket",
                 "shardq_complete_duration_seconds_bucket", "shardq_build_info",
                 "process_resident_memory_bytes", "process_cpu_seconds_total",
                 "shardq_journal_commits_total", "shardq_records_total",
                 "shardq_worker_records_total"):
        assert name in checked, name
    # Counters (and histogram series) are only ever graphed through a range
    # function such as rate(): their raw value is a running total.
    cumulative = {n for n, kind in types.items() if kind == "counter"} | {
        n + suffix for n, kind in types.items() if kind == "histogram"
        for suffix in ("_bucket", "_sum", "_count")}
    for where, expr in queries(dashboard):
        if where.startswith("variable"):
            continue
        for name in metric_names(expr) & cumulative:
            uses = re.findall(rf"\b{name}\b(\{{[^}}]*\}})?(\[)?", expr)
            assert all(bracket for _, bracket in uses), f"{where}: {name} without rate()"
