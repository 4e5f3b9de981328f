#!/usr/bin/env python3
"""Helm's own engine for the chart tests (e2e/tests/chart*), through helm-python-sdk.

The Rust tests do all the checking; this only calls Helm. It reads one JSON request on stdin
and writes one JSON answer on stdout:

  {"op": "render", "chart": DIR, "values": {...}, "name": "muster", "namespace": "muster-system"}
      -> {"ok": true, "manifests": {"muster/templates/x.yaml": "..."}}
  {"op": "lint", "chart": DIR, "values": {...}, "namespace": "..."}
      -> {"ok": true, "report": {...helm lint report...}}
  {"op": "schema", "chart": DIR, "values": {...}}
      -> {"ok": true} or {"ok": false, "error": "..."} (Helm's message)
  {"op": "chart", "chart": DIR}
      -> {"ok": true, "metadata": {...}, "crds": [{"name", "filename", "data"}], "values": {...}}
  {"op": "version"}
      -> {"ok": true, "helm": "v4.x.y", "sdk": "..."}
  {"op": "batch", "requests": [REQUEST, ...]}
      -> {"ok": true, "answers": [ANSWER, ...]} (one process for many requests: loading the
         Helm library is most of the cost)

Exit code 3 when helm-python-sdk is not installed (the tests then skip, or fail when
MUSTER_REQUIRE_HELM=1). Helm errors are answers ({"ok": false, ...}), not crashes.
"""

import json
import sys

try:
    import helm_python as helm
except ImportError as e:  # pragma: no cover - depends on the machine
    print(json.dumps({"ok": False, "missing": True, "error": f"helm-python-sdk is not installed: {e}"}))
    sys.exit(3)


def run(req):
    op = req.get("op")
    if op == "version":
        return {"ok": True, "helm": helm.helm_sdk_version(), "sdk": helm.__version__}
    chart_dir = req["chart"]
    values = req.get("values")
    if op == "render":
        with helm.Chart.load(chart_dir) as chart:
            manifests = chart.render(
                values=values,
                name=req.get("name", "muster"),
                namespace=req.get("namespace", "muster-system"),
                is_install=True,
            )
        return {"ok": True, "manifests": manifests}
    if op == "lint":
        report = helm.lint(
            chart_dir,
            values,
            strict=True,
            namespace=req.get("namespace", "muster-system"),
            kube_version=req.get("kubeVersion", "v1.32.0"),
        )
        return {"ok": True, "report": report}
    if op == "schema":
        with helm.Chart.load(chart_dir) as chart:
            chart.validate_schema(values)
        return {"ok": True}
    if op == "chart":
        with helm.Chart.load(chart_dir) as chart:
            return {
                "ok": True,
                "metadata": chart.metadata,
                "crds": chart.crds,
                "values": chart.values,
            }
    return {"ok": False, "error": f"unknown op {op!r}"}


def answer(req):
    try:
        if req.get("op") == "batch":
            return {"ok": True, "answers": [answer(r) for r in req["requests"]]}
        return run(req)
    except helm.HelmError as e:
        return {"ok": False, "error": str(e), "kind": type(e).__name__}


def main():
    json.dump(answer(json.load(sys.stdin)), sys.stdout)


if __name__ == "__main__":
    main()
