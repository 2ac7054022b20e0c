#!/usr/bin/env python3
"""The monitoring files against each other and against a real server.

deploy/grafana (dashboard, provisioning), deploy/prometheus/rules.yml, the
Compose services and the Kubernetes ConfigMaps that carry them; and every
series a panel or rule names, with the labels it filters or groups by,
checked against a scrape of a CPU-backend server under load (GPU gauges,
which a CPU server has none of, against the families the sampler emits).
`promtool check rules` runs when promtool is installed; the YAML checks
here run always. Needs PyYAML.

The live part needs GPUCOMPUTE_SERVER and GPUCOMPUTE_CLI (CTest sets them;
GPUCOMPUTE_LOADTEST optional) and skips without them.

Run: python3 tests/deploy/test_monitoring.py [-v]
"""

import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import time
import unittest
import urllib.request

import yaml

REPO = pathlib.Path(
    os.environ.get("GPUCOMPUTE_SOURCE_DIR") or pathlib.Path(__file__).resolve().parents[2]
)
DEPLOY = REPO / "deploy"
DASHBOARD = DEPLOY / "grafana" / "gpucompute.json"
RULES = DEPLOY / "prometheus" / "rules.yml"
SAMPLER_SOURCE = REPO / "server" / "ops" / "gpu_sampler.cc"

# Labels Prometheus adds at scrape time, and the histogram bucket label.
SCRAPE_LABELS = {"instance", "job", "le"}
# Labels of the GPU gauges (the sampler's: device, reason, direction).
GPU_LABELS = {"device", "reason", "direction"}
PROMQL_WORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
}


def dashboard_exprs():
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [(p["title"], t["expr"]) for p in panels for t in p.get("targets", [])]


def rule_exprs():
    rules = yaml.safe_load(RULES.read_text())
    return [(r["alert"], r["expr"]) for g in rules["groups"] for r in g["rules"]]


def series_names(expr):
    return set(re.findall(r"\b(gpucompute_[a-z0-9_]+)\b", expr))


def matchers(expr):
    """(metric, label, op, value) of every selector matcher in expr."""
    out = []
    for metric, body in re.findall(r"\b(gpucompute_[a-z0-9_]+)\{([^}]*)\}", expr):
        for label, op, value in re.findall(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"', body):
            out.append((metric, label, op, value))
    return out


def grouping_labels(expr):
    labels = set()
    for group in re.findall(r"\b(?:by|on|without|ignoring)\s*\(([^)]*)\)", expr):
        labels |= {w.strip() for w in group.split(",") if w.strip()}
    return labels


def sampler_families():
    return set(re.findall(r'Family\("(gpucompute_gpu_[a-z_]+)"', SAMPLER_SOURCE.read_text()))


def parse_exposition(text):
    """[(name, {label: value}, value)] and {family: type}."""
    samples, types = [], {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
            continue
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][\w:]*)(\{(.*)\})?\s+(\S+)", line)
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(3) or ""))
        samples.append((m.group(1), labels, float(m.group(4))))
    return samples, types


class RulesTest(unittest.TestCase):
    def test_every_rule_is_complete(self):
        rules = yaml.safe_load(RULES.read_text())
        names = []
        for group in rules["groups"]:
            self.assertTrue(group["name"])
            for rule in group["rules"]:
                names.append(rule["alert"])
                self.assertTrue(rule["expr"].strip(), rule["alert"])
                self.assertRegex(str(rule["for"]), r"^\d+[smh]$", rule["alert"])
                self.assertIn(rule["labels"]["severity"], {"critical", "warning", "info"})
                self.assertTrue(rule["annotations"]["summary"], rule["alert"])
                self.assertEqual(rule["expr"].count("("), rule["expr"].count(")"), rule["alert"])
        self.assertEqual(len(names), len(set(names)), names)

    def test_the_issue_s_alerts_are_there(self):
        exprs = " ".join(e for _, e in rule_exprs())
        for series in (
            "gpucompute_requests_total",
            "gpucompute_request_duration_seconds_bucket",
            "gpucompute_requests_queued",
            "gpucompute_queue_capacity",
            "gpucompute_device_healthy",
            "gpucompute_tensor_held_bytes",
            "gpucompute_gpu_throttled",
        ):
            self.assertIn(series, exprs)

    @unittest.skipUnless(shutil.which("promtool"), "promtool not installed (Debian: prometheus)")
    def test_promtool_accepts_the_rules(self):
        result = subprocess.run(
            ["promtool", "check", "rules", str(RULES)], capture_output=True, text=True
        )
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_prometheus_loads_the_rules_file(self):
        config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
        self.assertIn("rules.yml", config["rule_files"])


class DashboardTest(unittest.TestCase):
    def test_panels_are_laid_out_and_query_the_provisioned_source(self):
        dashboard = json.loads(DASHBOARD.read_text())
        datasources = yaml.safe_load(
            (DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
        )
        uid = datasources["datasources"][0]["uid"]
        ids = [p["id"] for p in dashboard["panels"]]
        self.assertEqual(len(ids), len(set(ids)))
        for panel in dashboard["panels"]:
            grid = panel["gridPos"]
            self.assertLessEqual(grid["x"] + grid["w"], 24, panel["title"])
            if panel["type"] == "row":
                continue
            self.assertEqual(panel["datasource"]["uid"], uid, panel["title"])
            self.assertTrue(panel.get("description"), panel["title"])
            self.assertTrue(panel["targets"], panel["title"])

    def test_the_issue_s_panels_are_there(self):
        exprs = " ".join(e for _, e in dashboard_exprs())
        for series in (
            "gpucompute_requests_total",
            "gpucompute_request_duration_seconds_bucket",
            "gpucompute_requests_queued",
            "gpucompute_gpu_utilization_ratio",
            "gpucompute_gpu_memory_used_bytes",
            "gpucompute_gpu_power_watts",
            "gpucompute_request_batch_size_bucket",
            "gpucompute_tensor_held_bytes",
            "gpucompute_shared_memory_registered_bytes",
        ):
            self.assertIn(series, exprs)


class ProvisioningTest(unittest.TestCase):
    def test_compose_provisions_grafana_and_the_rules(self):
        compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
        services = compose["services"]
        provider = yaml.safe_load(
            (DEPLOY / "grafana" / "provisioning" / "dashboards" / "gpucompute.yml").read_text()
        )
        path = provider["providers"][0]["options"]["path"]
        mounts = dict(v.split(":")[:2] for v in services["grafana"]["volumes"] if ":" in v)
        self.assertEqual(mounts["./grafana/provisioning"], "/etc/grafana/provisioning")
        self.assertEqual(mounts["./grafana/gpucompute.json"], f"{path}/gpucompute.json")
        self.assertIn("3000:3000", services["grafana"]["ports"])
        prometheus = dict(v.split(":")[:2] for v in services["prometheus"]["volumes"])
        self.assertEqual(prometheus["./prometheus/rules.yml"], "/etc/prometheus/rules.yml")

    def test_kubernetes_configmaps_carry_the_current_files(self):
        base = DEPLOY / "k8s" / "base"
        kustomization = yaml.safe_load((base / "kustomization.yaml").read_text())
        for name, key, source in (
            ("grafana-dashboard.yaml", "gpucompute.json", DASHBOARD),
            ("prometheus-rules.yaml", "rules.yml", RULES),
        ):
            self.assertIn(name, kustomization["resources"])
            configmap = yaml.safe_load((base / name).read_text())
            self.assertEqual(
                configmap["data"][key],
                source.read_text(),
                f"{name} is stale: run deploy/k8s/render-monitoring-configmaps",
            )
        dashboard = yaml.safe_load((base / "grafana-dashboard.yaml").read_text())
        self.assertEqual(dashboard["metadata"]["labels"]["grafana_dashboard"], "1")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return parse_exposition(r.read().decode())


SERVER = os.environ.get("GPUCOMPUTE_SERVER")
CLI = os.environ.get("GPUCOMPUTE_CLI")
LOADTEST = os.environ.get("GPUCOMPUTE_LOADTEST")


@unittest.skipUnless(SERVER and CLI, "GPUCOMPUTE_SERVER and GPUCOMPUTE_CLI not set")
class LiveSeriesTest(unittest.TestCase):
    """A CPU server under load: every series and label the dashboard and the
    rules use is in its scrape, and shapes never become series."""

    @classmethod
    def setUpClass(cls):
        cls.grpc_port, cls.metrics_port = free_port(), free_port()
        cls.server = subprocess.Popen(
            [
                SERVER,
                "--backend=cpu",
                f"--listen=127.0.0.1:{cls.grpc_port}",
                f"--metrics_listen=127.0.0.1:{cls.metrics_port}",
                "--cpu_workers=2",
                # The shared-memory gauges exist only where it is allowed.
                "--allow_shared_memory",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        line = cls.server.stdout.readline()
        while line and "listening on" not in line:
            line = cls.server.stdout.readline()
        if not line:
            raise RuntimeError("the server did not start")

    @classmethod
    def tearDownClass(cls):
        cls.server.terminate()
        cls.server.wait(timeout=60)

    def cli(self, *args, ok=True):
        result = subprocess.run(
            [CLI, *args, f"--server=127.0.0.1:{self.grpc_port}"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if ok:
            self.assertEqual(result.returncode, 0, result.stderr)

    def load(self, shapes):
        for m, n in shapes:
            for dtype in ("float32", "float64"):
                self.cli("transpose", f"--random={m}x{n}", f"--dtype={dtype}", "--repeat=2")
                self.cli("reduce", f"--random={m}x{n}", f"--dtype={dtype}")
                self.cli("matmul", f"--random={m}x{n}x{m}", f"--dtype={dtype}")

    def settled_scrape(self):
        for _ in range(200):
            samples, types = scrape(self.metrics_port)
            if sum(v for n, _, v in samples if n == "gpucompute_requests_in_flight") == 0:
                return samples, types
            time.sleep(0.01)
        return samples, types

    def test_every_series_and_label_used_exists(self):
        self.load([(3, 5), (64, 33)])
        self.cli("transpose", "--random=4x4", "--variant=no_such_variant", ok=False)
        if LOADTEST:
            subprocess.run(
                [
                    LOADTEST,
                    f"--server=127.0.0.1:{self.grpc_port}",
                    "--op=matmul",
                    "--shape=32x32x32",
                    "--concurrency=4",
                    "--warmup=0.1s",
                    "--max_time=1s",
                    "--window=0.2s",
                    "--stable_windows=1",
                    "--progress=never",
                ],
                capture_output=True,
                timeout=120,
                check=True,
            )
        samples, types = self.settled_scrape()
        labels_of, values_of = {}, {}
        for name, labels, _ in samples:
            labels_of.setdefault(name, set()).update(labels)
            for k, v in labels.items():
                values_of.setdefault((name, k), set()).add(v)
        gpu = sampler_families()
        self.assertIn("gpucompute_gpu_utilization_ratio", gpu)
        for where, expr in dashboard_exprs() + rule_exprs():
            used_labels = set()
            for name in series_names(expr):
                base = re.sub(r"_(bucket|sum|count)$", "", name)
                if name.startswith("gpucompute_gpu_") and name != "gpucompute_gpu_telemetry_up":
                    self.assertIn(base, gpu, f"{where}: {name} is no GPU gauge the server has")
                    used_labels |= GPU_LABELS
                    continue
                self.assertIn(name, labels_of, f"{where}: {name} is not in the scrape")
                used_labels |= labels_of[name]
            for metric, label, op, value in matchers(expr):
                if metric.startswith("gpucompute_gpu_") and metric != "gpucompute_gpu_telemetry_up":
                    self.assertIn(label, GPU_LABELS, f"{where}: {metric}{{{label}}}")
                    continue
                self.assertIn(label, labels_of[metric], f"{where}: {metric} has no label {label}")
                if op == "=":
                    self.assertIn(
                        value,
                        values_of[(metric, label)],
                        f'{where}: {metric}{{{label}="{value}"}} matches nothing',
                    )
            for label in grouping_labels(expr) - SCRAPE_LABELS - PROMQL_WORDS:
                self.assertIn(label, used_labels, f"{where}: no series it uses has {label}")
        self.assertEqual(types["gpucompute_request_duration_seconds"], "histogram")

    def test_shapes_never_become_series(self):
        def counts():
            samples, _ = self.settled_scrape()
            out = {}
            for name, labels, _ in samples:
                if name.startswith("gpucompute_request"):
                    out.setdefault(name, set()).add(tuple(sorted(labels.items())))
            return {k: len(v) for k, v in out.items()}, samples

        self.load([(7, 9)])
        before, _ = counts()
        self.load([(m, m + 3) for m in (1, 2, 5, 17, 33, 100, 129)] + [(1000, 1)])
        after, samples = counts()
        self.assertEqual(before, after)
        for name, labels, _ in samples:
            for value in labels.values():
                self.assertNotRegex(value, r"\d+x\d+", f"{name}: a shape in a label")


if __name__ == "__main__":
    unittest.main()
