#!/usr/bin/env python3
"""Structural checks of the deployment files.

Parses the Dockerfile, deploy/docker-compose.yml (and its shared-memory
override, deploy/docker-compose.shm.yml), deploy/prometheus/prometheus.yml
and every YAML file under deploy/k8s, and checks that they agree with each
other and with the server: ports, health checks, GPU requests, the non-root
user, the flags file, the shared-memory set-ups. Needs PyYAML (Debian
package python3-yaml).

Run: python3 tests/deploy/test_deploy_files.py [-v]
"""

import copy
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import unittest

import yaml

REPO = pathlib.Path(
    os.environ.get("GPUCOMPUTE_SOURCE_DIR") or pathlib.Path(__file__).resolve().parents[2]
)
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"

# The server's default ports, used when the server source does not (yet)
# define the --listen and --metrics_listen flags: gRPC on 50051 (the gRPC
# convention) and Prometheus metrics on 8002 (Triton's metrics port).
FALLBACK_GRPC_PORT = 50051
FALLBACK_METRICS_PORT = 8002

# The flags gpucompute-server defines (those it documents for deployment;
# the ones found in the server source are added below). A flags file naming
# any other flag would stop the server at start (absl rejects unknown flags).
DOCUMENTED_SERVER_FLAGS = {
    "listen",
    "backend",
    "max_matrix_bytes",
    "devices",
    "metrics_listen",
    "tls_cert",
    "tls_key",
    "tls_client_ca",
    "auth_token_file",
    "autotune_cache",
    "device_memory_fraction",
    "max_queue_depth",
    "flagfile",
}

# Longest drain the server allows itself after SIGTERM when the source does
# not say (its --shutdown_grace_seconds default).
FALLBACK_SHUTDOWN_GRACE_SECONDS = 30

# The UID the image runs as; Kubernetes must run the pod as the same one.
IMAGE_UID = 10001


def server_flag_defaults():
    """{flag: (default text, file)} from the server's ABSL_FLAG definitions."""
    pattern = re.compile(r'ABSL_FLAG\(\s*[^,]+?\s*,\s*(\w+)\s*,\s*("[^"]*"|[^,]+?)\s*,', re.S)
    server = REPO / "server"
    sources = (
        sorted(p for p in server.rglob("*") if p.suffix in (".cc", ".h")) if server.is_dir() else []
    )
    sources.sort(key=lambda p: p.name != "main.cc")
    found = {}
    for path in sources:
        for name, default in pattern.findall(path.read_text(errors="replace")):
            found.setdefault(name, (default.strip('"'), path.relative_to(REPO)))
    return found


SERVER_DEFAULTS = server_flag_defaults()
SERVER_FLAGS = DOCUMENTED_SERVER_FLAGS | set(SERVER_DEFAULTS)


def _default(flag, fallback, convert):
    if flag in SERVER_DEFAULTS:
        try:
            value, path = SERVER_DEFAULTS[flag]
            return convert(value), f"--{flag} in {path}"
        except (ValueError, IndexError):
            pass
    return fallback, f"--{flag}: constant in this test (not in the server source yet)"


def _port_of(address):
    return int(address.rsplit(":", 1)[1])


GRPC_PORT, _grpc_from = _default("listen", FALLBACK_GRPC_PORT, _port_of)
METRICS_PORT, _metrics_from = _default("metrics_listen", FALLBACK_METRICS_PORT, _port_of)
SHUTDOWN_GRACE, _grace_from = _default(
    "shutdown_grace_seconds", FALLBACK_SHUTDOWN_GRACE_SECONDS, int
)
PORTS_FROM = f"{_grpc_from}; {_metrics_from}"


# ---------------------------------------------------------------- Dockerfile


class Instruction:
    def __init__(self, keyword, args, line):
        self.keyword = keyword
        self.args = args
        self.line = line

    def json_or_words(self, text=None):
        """Exec form (JSON array) or shell words of text (default: args)."""
        text = self.args if text is None else text
        text = text.strip()
        if text.startswith("["):
            return json.loads(text)
        return shlex.split(text)

    def __repr__(self):
        return f"line {self.line}: {self.keyword} {self.args}"


def parse_dockerfile(path):
    """Instructions with line continuations joined and comments dropped."""
    instructions = []
    pending, start = "", 0
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # comment lines inside a continued instruction
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        pending += stripped
        keyword, _, args = pending.partition(" ")
        instructions.append(Instruction(keyword.upper(), args.strip(), start))
        pending = ""
    return instructions


def substitute(text, values):
    return re.sub(
        r"\$\{(\w+)\}|\$(\w+)", lambda m: values.get(m.group(1) or m.group(2), m.group(0)), text
    )


def arg_default(instruction):
    name, _, default = instruction.args.partition("=")
    default = default.strip()
    if len(default) >= 2 and default[0] == default[-1] and default[0] in "\"'":
        default = default[1:-1]
    return name.strip(), default


class Stage:
    def __init__(self, image, name, instructions):
        self.image = image
        self.name = name
        self.instructions = instructions

    def all(self, keyword):
        return [i for i in self.instructions if i.keyword == keyword]


def dockerfile_stages(path):
    global_args = {}
    stages = []
    for ins in parse_dockerfile(path):
        if ins.keyword == "FROM":
            words = substitute(ins.args, global_args).split()
            words = [w for w in words if not w.startswith("--platform")]
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(words[0], name, []))
        elif not stages:
            if ins.keyword == "ARG":
                key, value = arg_default(ins)
                global_args[key] = value
        else:
            stages[-1].instructions.append(ins)
    return stages


def registry_host(image):
    """The registry host an image reference names, or None (Docker Hub)."""
    first, sep, _ = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return None


CUDA_IMAGE = re.compile(r"^nvidia/cuda:(13\.0\.\d+)-(devel|runtime)-ubuntu24\.04$")


class DockerfileTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.path = REPO / "Dockerfile"
        cls.stages = dockerfile_stages(cls.path)
        cls.build, cls.runtime = cls.stages[0], cls.stages[-1]

    def test_multi_stage_devel_then_runtime_of_one_cuda_version(self):
        self.assertGreaterEqual(len(self.stages), 2, "expected a build and a runtime stage")
        build = CUDA_IMAGE.match(self.build.image)
        runtime = CUDA_IMAGE.match(self.runtime.image)
        self.assertTrue(
            build and build.group(2) == "devel",
            f"first stage should be nvidia/cuda:13.0.x-devel-ubuntu24.04, "
            f"is {self.build.image}",
        )
        self.assertTrue(
            runtime and runtime.group(2) == "runtime",
            f"last stage should be nvidia/cuda:13.0.x-runtime-ubuntu24.04, "
            f"is {self.runtime.image}",
        )
        self.assertEqual(build.group(1), runtime.group(1), "devel and runtime CUDA versions differ")

    def test_images_name_no_registry_host(self):
        for stage in self.stages:
            self.assertIsNone(registry_host(stage.image), stage.image)

    def test_runtime_user_is_fixed_non_root_uid(self):
        users = self.runtime.all("USER")
        self.assertTrue(users, "runtime stage has no USER")
        user = users[-1].args.split(":")[0]
        self.assertNotIn(user, ("root", "0"))
        self.assertEqual(
            user,
            str(IMAGE_UID),
            "USER should be the numeric UID, so that runAsNonRoot can verify it",
        )

    def test_expose_matches_server_default_ports(self):
        exposed = set()
        for ins in self.runtime.all("EXPOSE"):
            exposed |= {int(p.split("/")[0]) for p in ins.args.split()}
        self.assertEqual(exposed, {GRPC_PORT, METRICS_PORT}, f"server defaults from {PORTS_FROM}")

    def test_healthcheck_runs_gpucompute_health(self):
        checks = self.runtime.all("HEALTHCHECK")
        self.assertEqual(len(checks), 1)
        _, _, command = checks[0].args.partition("CMD")
        words = checks[0].json_or_words(command)
        self.assertEqual(words[:2], ["gpucompute", "health"], words)
        self.assertIn(f"127.0.0.1:{GRPC_PORT}", " ".join(words))

    def test_entrypoint_is_the_server_on_both_ports(self):
        entry = self.runtime.all("ENTRYPOINT")
        self.assertTrue(entry, "no ENTRYPOINT")
        words = entry[-1].json_or_words()
        self.assertTrue(
            entry[-1].args.startswith("["), "use the exec form (signals reach the server)"
        )
        self.assertEqual(words[0], "gpucompute-server")
        self.assertIn(f"--listen=0.0.0.0:{GRPC_PORT}", words)
        self.assertIn(f"--metrics_listen=0.0.0.0:{METRICS_PORT}", words)

    def test_cuda_architectures_argument(self):
        args = dict(arg_default(i) for i in self.build.all("ARG"))
        self.assertIn("CUDA_ARCHITECTURES", args)
        archs = args["CUDA_ARCHITECTURES"].split(";")
        for arch in archs:
            self.assertNotIn(arch, ("all", "all-major", "native"))
            self.assertRegex(arch, r"^\d+(-real|-virtual)?$")
        runs = " ".join(i.args for i in self.build.all("RUN"))
        self.assertRegex(runs, r'-DCMAKE_CUDA_ARCHITECTURES="?\$\{?CUDA_ARCHITECTURES\}?"?')

    def test_build_stage_builds_what_the_runtime_copies(self):
        runs = " ".join(i.args for i in self.build.all("RUN"))
        # cmake --build --target ..., or scripts/build with GPUCOMPUTE_BUILD_TARGETS.
        targets = re.findall(r'--target((?:\s+[\w-]+)+)|GPUCOMPUTE_BUILD_TARGETS="([^"]*)"', runs)
        built = {t for groups in targets for group in groups for t in group.split()}
        for target in ("gpucompute-server", "gpucompute", "gpucompute-loadtest"):
            self.assertIn(target, built, "the build stage does not build it")
        copied = " ".join(i.args for i in self.runtime.all("COPY") if "--from=" in i.args)
        for binary in (
            "build/server/gpucompute-server",
            "build/client/cli/gpucompute",
            "build/client/loadtest/gpucompute-loadtest",
        ):
            self.assertIn(binary, copied)

    def test_run_steps_use_scripts_that_exist(self):
        used = set()
        for stage in self.stages:
            for ins in stage.all("RUN"):
                used |= set(re.findall(r"(?<![\w/])(scripts/[\w.\-/]+)", ins.args))
        self.assertTrue(used, "the build should use the project's scripts/ (scripts/setup)")
        for script in used:
            path = REPO / script
            self.assertTrue(path.is_file(), f"{script} is used in the Dockerfile but missing")
            self.assertTrue(os.access(path, os.X_OK), f"{script} is not executable")

    def test_copy_sources_exist(self):
        for stage in self.stages:
            for ins in stage.all("COPY"):
                if "--from=" in ins.args:
                    continue
                words = [w for w in ins.args.split() if not w.startswith("--")]
                for source in words[:-1]:
                    if source != ".":
                        self.assertTrue((REPO / source).exists(), f"{ins}: {source} missing")

    def test_dockerignore_keeps_build_trees_and_git_out(self):
        lines = {l.strip() for l in (REPO / ".dockerignore").read_text().splitlines()}
        for entry in (".git", "build", "build-*", ".gpu"):
            self.assertIn(entry, lines)
        self.assertNotIn("scripts", lines)


# ------------------------------------------------------------------- Compose


def interpolate(value):
    """Compose's ${VAR:-default} / ${VAR-default} with the variables unset."""
    if isinstance(value, str):
        return re.sub(r"\$\{(\w+)(?::?-([^}]*))?\}", lambda m: m.group(2) or "", value)
    if isinstance(value, list):
        return [interpolate(v) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v) for k, v in value.items()}
    return value


def container_port(mapping):
    if isinstance(mapping, dict):
        return int(mapping["target"])
    return int(str(mapping).split("/")[0].rsplit(":", 1)[-1])


class ComposeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.path = DEPLOY / "docker-compose.yml"
        cls.compose = interpolate(yaml.safe_load(cls.path.read_text()))
        cls.services = cls.compose["services"]
        cls.server = cls.services["gpucompute"]

    def test_server_builds_this_repository_dockerfile(self):
        build = self.server["build"]
        context = (self.path.parent / build["context"]).resolve()
        self.assertEqual(context, REPO.resolve())
        self.assertTrue((context / build.get("dockerfile", "Dockerfile")).is_file())

    def test_gpu_reservation(self):
        devices = self.server["deploy"]["resources"]["reservations"]["devices"]
        nvidia = [d for d in devices if d.get("driver") == "nvidia"]
        self.assertTrue(nvidia, "no device reservation with driver: nvidia")
        for device in nvidia:
            self.assertIn("gpu", device.get("capabilities", []))
            self.assertTrue("count" in device or "device_ids" in device, "give count or device_ids")
            if "count" in device:
                self.assertTrue(device["count"] == "all" or int(device["count"]) >= 1)

    def test_server_publishes_its_ports(self):
        ports = {container_port(p) for p in self.server.get("ports", [])}
        self.assertLessEqual({GRPC_PORT, METRICS_PORT}, ports)

    def test_healthcheck(self):
        test = self.server["healthcheck"]["test"]
        words = test if isinstance(test, list) else ["CMD-SHELL", test]
        self.assertIn(words[0], ("CMD", "CMD-SHELL"))
        command = " ".join(words[1:])
        self.assertIn("gpucompute health", command)
        self.assertIn(f"127.0.0.1:{GRPC_PORT}", command)

    def test_stop_grace_period_covers_the_server_drain(self):
        grace = self.server.get("stop_grace_period", "10s")
        self.assertRegex(grace, r"^\d+s$")
        self.assertGreater(
            int(grace[:-1]),
            SHUTDOWN_GRACE,
            f"Docker would kill the server mid-drain ({_grace_from})",
        )

    def test_prometheus_scrapes_the_server_metrics_port(self):
        prometheus = self.services["prometheus"]
        self.assertIsNone(registry_host(prometheus["image"]), prometheus["image"])
        mounted = [v.split(":")[0] for v in prometheus.get("volumes", []) if isinstance(v, str)]
        config_path = (self.path.parent / "prometheus" / "prometheus.yml").resolve()
        self.assertIn(config_path, [(self.path.parent / m).resolve() for m in mounted])
        config = yaml.safe_load(config_path.read_text())
        targets = [
            t
            for job in config["scrape_configs"]
            for group in job.get("static_configs", [])
            for t in group["targets"]
        ]
        self.assertIn(f"gpucompute:{METRICS_PORT}", targets)
        for target in targets:
            self.assertIn(target.split(":")[0], self.services, f"{target}: no such service")

    def test_loadtest_is_an_opt_in_profile_against_the_server(self):
        loadtest = self.services["loadtest"]
        self.assertIn("loadtest", loadtest.get("profiles", []))
        entry = loadtest.get("entrypoint")
        entry = entry if isinstance(entry, list) else shlex.split(entry or "")
        command = loadtest.get("command", [])
        command = command if isinstance(command, list) else shlex.split(command)
        self.assertEqual((entry + command)[0], "gpucompute-loadtest")
        self.assertIn(f"--server=gpucompute:{GRPC_PORT}", command)
        self.assertEqual(loadtest["depends_on"]["gpucompute"]["condition"], "service_healthy")

    def test_images_name_no_registry_host(self):
        for name, service in self.services.items():
            if "image" in service:
                self.assertIsNone(registry_host(service["image"]), f"{name}: {service['image']}")


# ---------------------------------------------------------------- Kubernetes


def load_k8s_files():
    """{path: [documents]} for every YAML file under deploy/k8s."""
    files = {}
    for path in sorted(K8S.rglob("*.y*ml")):
        files[path] = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return files


def k8s_objects(files):
    return [
        d
        for docs in files.values()
        for d in docs
        if isinstance(d, dict)
        and "kind" in d
        and "apiVersion" in d
        and not d["apiVersion"].startswith("kustomize.config.k8s.io")
    ]


def json_pointer(path):
    return [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]


def apply_json_patch(document, operations):
    """RFC 6902 add/replace/remove, enough to check the components' patches."""
    document = copy.deepcopy(document)
    for op in operations:
        *parents, last = json_pointer(op["path"])
        node = document
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if op["op"] == "add":
            if isinstance(node, list):
                node.insert(len(node) if last == "-" else int(last), copy.deepcopy(op["value"]))
            else:
                node[last] = copy.deepcopy(op["value"])
        elif op["op"] == "replace":
            key = int(last) if isinstance(node, list) else last
            if not isinstance(node, list) and key not in node:
                raise KeyError(f"replace of missing {op['path']}")
            node[key] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            del node[int(last) if isinstance(node, list) else last]
        else:
            raise ValueError(f"unsupported op {op['op']}")
    return document


PROBE_HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")


class KubernetesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.files = load_k8s_files()
        cls.objects = k8s_objects(cls.files)
        deployments = [o for o in cls.objects if o["kind"] == "Deployment"]
        assert len(deployments) == 1, "expected one Deployment under deploy/k8s"
        cls.deployment = deployments[0]
        cls.pod = cls.deployment["spec"]["template"]["spec"]
        cls.container = cls.pod["containers"][0]

    def test_every_file_parses_and_objects_are_named(self):
        self.assertTrue(self.files, "no YAML under deploy/k8s")
        for obj in self.objects:
            self.assertTrue(obj.get("metadata", {}).get("name"), obj)

    def test_kustomizations_reference_existing_files(self):
        kustomizations = [p for p in self.files if p.name == "kustomization.yaml"]
        self.assertIn(K8S / "kustomization.yaml", kustomizations)
        for path in kustomizations:
            doc = self.files[path][0]
            self.assertIn(doc["kind"], ("Kustomization", "Component"), path)
            refs = list(doc.get("resources", [])) + list(doc.get("components", []))
            refs += [p["path"] for p in doc.get("patches", []) if "path" in p]
            for ref in refs:
                target = (path.parent / ref).resolve()
                self.assertTrue(target.exists(), f"{path}: {ref} missing")
                if target.is_dir():
                    self.assertTrue((target / "kustomization.yaml").is_file(), f"{path}: {ref}")

    def test_images_name_no_registry_host(self):
        for container in self.pod["containers"]:
            self.assertIsNone(registry_host(container["image"]), container["image"])

    def test_requests_one_gpu_and_sets_limits(self):
        resources = self.container["resources"]
        limits, requests = resources["limits"], resources.get("requests", {})
        self.assertGreaterEqual(int(limits["nvidia.com/gpu"]), 1)
        if "nvidia.com/gpu" in requests:
            self.assertEqual(
                str(requests["nvidia.com/gpu"]),
                str(limits["nvidia.com/gpu"]),
                "extended resources: request must equal limit",
            )
        for key in ("cpu", "memory"):
            self.assertIn(key, limits)
            self.assertIn(key, requests)

    def test_container_ports(self):
        ports = {p["containerPort"]: p.get("name") for p in self.container["ports"]}
        self.assertEqual(ports.get(GRPC_PORT), "grpc")
        self.assertEqual(ports.get(METRICS_PORT), "metrics")

    def test_probes_are_native_grpc_on_the_server_port(self):
        for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
            probe = self.container.get(kind)
            self.assertIsNotNone(probe, f"no {kind}")
            self.assertEqual(probe.get("grpc", {}).get("port"), GRPC_PORT, kind)
            # Service "" (the server's overall status) unless set otherwise.
            self.assertIn(probe["grpc"].get("service", ""), ("", "gpucompute.v1.Compute"))

    def test_startup_probe_allows_slow_calibration(self):
        probe = self.container["startupProbe"]
        budget = probe.get("periodSeconds", 10) * probe.get("failureThreshold", 3)
        self.assertGreaterEqual(budget, 120, "startup probe gives up before calibration ends")

    def test_runs_as_non_root_with_no_privileges(self):
        pod_sc = self.pod.get("securityContext", {})
        sc = self.container.get("securityContext", {})
        self.assertTrue(sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")))
        self.assertEqual(sc.get("runAsUser", pod_sc.get("runAsUser")), IMAGE_UID)
        self.assertIs(sc.get("allowPrivilegeEscalation"), False)
        self.assertIs(sc.get("readOnlyRootFilesystem"), True)
        self.assertIn("ALL", sc.get("capabilities", {}).get("drop", []))

    def test_grace_period_covers_draining(self):
        grace = self.pod.get("terminationGracePeriodSeconds", 30)
        pre_stop = self.container.get("lifecycle", {}).get("preStop", {})
        sleep = 0
        if pre_stop.get("exec", {}).get("command", [""])[0] == "sleep":
            sleep = int(pre_stop["exec"]["command"][1])
        self.assertGreater(
            grace - sleep,
            SHUTDOWN_GRACE,
            f"the kubelet would kill the server mid-drain ({_grace_from})",
        )

    def test_writable_paths_are_volumes(self):
        mounts = {m["mountPath"] for m in self.container.get("volumeMounts", [])}
        self.assertIn("/tmp", mounts)
        self.assertIn("/var/lib/gpucompute", mounts)

    def test_flags_configmap_is_mounted_and_passed_with_flagfile(self):
        flagfiles = [
            a.split("=", 1)[1]
            for a in self.container.get("args", [])
            if a.startswith("--flagfile=")
        ]
        self.assertEqual(len(flagfiles), 1, "pass the ConfigMap's flags file with --flagfile")
        flagfile = pathlib.PurePosixPath(flagfiles[0])
        volumes = {v["name"]: v for v in self.pod["volumes"]}
        mount = [
            m
            for m in self.container["volumeMounts"]
            if flagfile.parent == pathlib.PurePosixPath(m["mountPath"])
        ]
        self.assertEqual(len(mount), 1, f"{flagfile.parent} is not a volume mount")
        config_map = volumes[mount[0]["name"]].get("configMap")
        self.assertIsNotNone(config_map, "the flags file should come from a ConfigMap")
        maps = {o["metadata"]["name"]: o for o in self.objects if o["kind"] == "ConfigMap"}
        self.assertIn(config_map["name"], maps)
        data = maps[config_map["name"]]["data"]
        self.assertIn(flagfile.name, data)
        for line in data[flagfile.name].splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            self.assertRegex(line, r"^--\w+(=.*)?$", "absl flagfile lines are --flag=value")
            self.assertIn(line[2:].split("=")[0], SERVER_FLAGS, f"unknown server flag: {line}")

    def test_headless_service_selects_the_pods(self):
        services = [o for o in self.objects if o["kind"] == "Service"]
        headless = [s for s in services if s["spec"].get("clusterIP") == "None"]
        self.assertTrue(headless, "no headless Service (clusterIP: None)")
        labels = self.deployment["spec"]["template"]["metadata"]["labels"]
        selector = self.deployment["spec"]["selector"]["matchLabels"]
        self.assertLessEqual(selector.items(), labels.items())
        for service in services:
            self.assertLessEqual(
                service["spec"]["selector"].items(),
                labels.items(),
                f"{service['metadata']['name']} selects no pod",
            )
        ports = {p["port"]: p for p in headless[0]["spec"]["ports"]}
        self.assertIn(GRPC_PORT, ports)
        self.assertIn(METRICS_PORT, ports)
        names = {p.get("name") for p in self.container["ports"]}
        for port in ports.values():
            target = port.get("targetPort", port["port"])
            self.assertTrue(target in names or target in (GRPC_PORT, METRICS_PORT), port)

    def test_components_patch_into_a_valid_deployment(self):
        components = sorted(
            p.parent
            for p, docs in self.files.items()
            if p.name == "kustomization.yaml" and docs[0]["kind"] == "Component"
        )
        self.assertTrue(components, "no components (tls, mtls, auth) under deploy/k8s")
        deployment = self.deployment
        # In the order overlays/secure lists them: mtls patches what tls added.
        for component in sorted(components, key=lambda p: ("mtls" in p.name, p.name)):
            for patch in self.files[component / "kustomization.yaml"][0].get("patches", []):
                self.assertEqual(patch["target"]["kind"], "Deployment")
                deployment = apply_json_patch(deployment, self.files[component / patch["path"]][0])
        pod = deployment["spec"]["template"]["spec"]
        container = pod["containers"][0]
        args = container["args"]
        for flag in ("--tls_cert=", "--tls_key=", "--tls_client_ca=", "--auth_token_file="):
            value = [a for a in args if a.startswith(flag)]
            self.assertEqual(len(value), 1, flag)
            path = pathlib.PurePosixPath(value[0].split("=", 1)[1])
            mount = [
                m
                for m in container["volumeMounts"]
                if path.parent == pathlib.PurePosixPath(m["mountPath"])
            ]
            self.assertEqual(len(mount), 1, f"{path} is not on a mounted volume")
            volume = {v["name"]: v for v in pod["volumes"]}[mount[0]["name"]]
            self.assertIn("secret", volume, f"{path} should come from a Secret")
        for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
            probe = container[kind]
            handlers = [h for h in PROBE_HANDLERS if h in probe]
            self.assertEqual(handlers, ["exec"], f"{kind}: kubelet's grpc probe cannot do TLS")
            command = probe["exec"]["command"]
            self.assertEqual(command[:2], ["gpucompute", "health"])
            self.assertIn(f"--server=127.0.0.1:{GRPC_PORT}", command)
            for flag in ("--tls_ca=", "--tls_cert=", "--tls_key="):
                self.assertTrue(any(c.startswith(flag) for c in command), f"{kind}: {flag}")

    def test_kustomize_builds(self):
        kubectl = shutil.which("kubectl")
        if not kubectl:
            self.skipTest("kubectl not installed: `kubectl kustomize` build not checked")
        roots = sorted(
            p.parent
            for p, docs in self.files.items()
            if p.name == "kustomization.yaml" and docs[0]["kind"] == "Kustomization"
        )
        for root in roots:
            result = subprocess.run(
                [kubectl, "kustomize", str(root)], capture_output=True, text=True, timeout=120
            )
            self.assertEqual(result.returncode, 0, f"{root}: {result.stderr}")
            kinds = [d["kind"] for d in yaml.safe_load_all(result.stdout) if d]
            self.assertIn("Deployment", kinds, root)


def server_flags_in_deploy_files():
    """{flag: [where]} for every server flag the deployment files pass."""
    used = {}

    def note(words, where):
        for word in words:
            match = re.match(r"^--(\w+)", str(word))
            if match:
                used.setdefault(match.group(1), []).append(where)

    runtime = dockerfile_stages(REPO / "Dockerfile")[-1]
    for ins in runtime.all("ENTRYPOINT"):
        note(ins.json_or_words(), "Dockerfile ENTRYPOINT")
    for name in ("docker-compose.yml", "docker-compose.shm.yml"):
        compose = yaml.safe_load((DEPLOY / name).read_text())
        note(compose["services"]["gpucompute"].get("command", []), name)
    files = load_k8s_files()
    for path, docs in files.items():
        where = str(path.relative_to(REPO))
        for doc in docs:
            if isinstance(doc, dict) and doc.get("kind") == "ConfigMap":
                for text in doc.get("data", {}).values():
                    note([l.strip() for l in text.splitlines()], where)
            if isinstance(doc, dict) and doc.get("kind") == "Deployment":
                for container in doc["spec"]["template"]["spec"]["containers"]:
                    note(container.get("args", []), where)
            for op in doc if isinstance(doc, list) else []:
                if op.get("path", "").endswith("/args/-"):
                    note([op["value"]], where)
    return used


class ServerFlagsTest(unittest.TestCase):
    def test_deployment_files_pass_only_server_flags(self):
        for flag, where in server_flags_in_deploy_files().items():
            self.assertIn(flag, SERVER_FLAGS, f"--{flag} (in {', '.join(where)}) is no server flag")


# ------------------------------------------------------------- shared memory

SOCKET_PATH = "/run/gpucompute/gpucompute.sock"


def listen_addresses(args):
    """The last --listen among args (later flags win), split at commas."""
    values = [a.split("=", 1)[1] for a in args if str(a).startswith("--listen=")]
    return values[-1].split(",") if values else []


def flag_value(args, flag):
    values = [a.split("=", 1)[1] for a in args if str(a).startswith(f"--{flag}=")]
    return values[-1] if values else None


class SharedMemoryChecks:
    """What both set-ups must do: the server on TCP and a unix socket with
    --allow_shared_memory and bounds on pinned memory; the client through
    that socket, sharing /dev/shm and the socket's directory, as the same
    user."""

    def check_server_args(self, args):
        self.assertIn("--allow_shared_memory", args)
        addresses = listen_addresses(args)
        self.assertIn(f"0.0.0.0:{GRPC_PORT}", addresses, "keep TCP for the probes and others")
        self.assertIn(f"unix:{SOCKET_PATH}", addresses)
        self.assertRegex(flag_value(args, "unix_socket_mode") or "", r"^0[0-7]{3}$")
        self.assertNotIn(
            flag_value(args, "unix_socket_mode")[-1],
            "2367",
            "other users must not write to (call through) the socket",
        )
        for flag in ("shared_memory_max_bytes", "shared_memory_max_regions"):
            value = flag_value(args, flag)
            self.assertIsNotNone(value, f"bound pinned (locked) memory with --{flag}")
            self.assertGreater(int(value), 0)
        for arg in args:
            match = re.match(r"^--(\w+)", str(arg))
            if match:
                self.assertIn(match.group(1), SERVER_FLAGS, f"{arg}: no server flag")

    def check_client_args(self, args):
        self.assertIn("--shm", args)
        self.assertIn(f"--server=unix:{SOCKET_PATH}", args)


class ComposeSharedMemoryTest(unittest.TestCase, SharedMemoryChecks):
    @classmethod
    def setUpClass(cls):
        cls.base = interpolate(yaml.safe_load((DEPLOY / "docker-compose.yml").read_text()))
        cls.path = DEPLOY / "docker-compose.shm.yml"
        cls.override = interpolate(yaml.safe_load(cls.path.read_text()))
        cls.server = cls.override["services"]["gpucompute"]
        cls.client = cls.override["services"]["shm-client"]

    def test_overrides_the_base_server_and_keeps_its_command(self):
        self.assertIn("gpucompute", self.base["services"])
        command = self.server["command"]
        # Compose replaces command lists: the base's flags must be repeated.
        for arg in self.base["services"]["gpucompute"].get("command", []):
            if not str(arg).startswith("--listen="):
                self.assertIn(arg, command)
        self.check_server_args(command)

    def test_server_shares_its_ipc_namespace_with_room_and_memlock(self):
        self.assertEqual(self.server.get("ipc"), "shareable")
        self.assertRegex(
            str(self.server.get("shm_size", "")),
            r"^\d+[kmg]?b?$",
            "Docker's default /dev/shm is 64 MiB",
        )
        memlock = self.server.get("ulimits", {}).get("memlock")
        self.assertEqual(memlock, -1, "pinning registered pages needs memlock unlimited")
        # Volumes replace the base list: keep the autotune cache.
        for volume in self.base["services"]["gpucompute"].get("volumes", []):
            self.assertIn(volume, self.server["volumes"])

    def test_client_joins_the_server_ipc_and_socket_directory_as_the_same_user(self):
        self.assertIn("shm", self.client.get("profiles", []), "the client is opt-in")
        self.assertEqual(self.client.get("ipc"), "service:gpucompute")
        self.assertEqual(
            str(self.client.get("user", "")).split(":")[0],
            str(IMAGE_UID),
            "objects are created 0600: the server must run as the same user",
        )
        self.assertIsNone(registry_host(self.client["image"]), self.client["image"])
        entry = self.client.get("entrypoint", [])
        entry = entry if isinstance(entry, list) else shlex.split(entry)
        self.assertEqual(entry[0], "gpucompute")
        self.check_client_args(self.client["command"])
        directory = str(pathlib.PurePosixPath(SOCKET_PATH).parent)
        mounts = {}
        for name in ("server", "client"):
            service = getattr(self, name)
            mounts[name] = [
                v.split(":")[0]
                for v in service.get("volumes", [])
                if isinstance(v, str) and v.split(":")[1] == directory
            ]
            self.assertEqual(len(mounts[name]), 1, f"{name}: nothing mounted at {directory}")
        self.assertEqual(mounts["server"], mounts["client"], "one volume for both")
        self.assertEqual(self.client["depends_on"]["gpucompute"]["condition"], "service_healthy")

    def test_socket_volume_is_writable_by_the_server_user(self):
        volume = self.override["volumes"]["gpucompute-run"]
        options = volume["driver_opts"]
        self.assertEqual(options["type"], "tmpfs")
        fields = dict(o.split("=", 1) for o in options["o"].split(","))
        self.assertEqual(fields.get("uid"), str(IMAGE_UID))

    def test_compose_config_merges(self):
        docker = shutil.which("docker")
        if (
            not docker
            or subprocess.run(
                [docker, "compose", "version"], capture_output=True, timeout=60
            ).returncode
            != 0
        ):
            self.skipTest("docker compose not installed: merged configuration not checked")
        result = subprocess.run(
            [
                docker,
                "compose",
                "-f",
                str(DEPLOY / "docker-compose.yml"),
                "-f",
                str(self.path),
                "--profile",
                "shm",
                "config",
                "--format",
                "json",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        merged = json.loads(result.stdout)["services"]
        self.check_server_args(merged["gpucompute"]["command"])
        self.assertEqual(merged["shm-client"]["ipc"], "service:gpucompute")


class KubernetesSharedMemoryTest(unittest.TestCase, SharedMemoryChecks):
    @classmethod
    def setUpClass(cls):
        cls.files = load_k8s_files()
        cls.component = K8S / "components" / "shared-memory"
        deployment = [o for o in k8s_objects(cls.files) if o["kind"] == "Deployment"][0]
        for patch in cls.files[cls.component / "kustomization.yaml"][0]["patches"]:
            assert patch["target"]["kind"] == "Deployment"
            deployment = apply_json_patch(deployment, cls.files[cls.component / patch["path"]][0])
        cls.pod = deployment["spec"]["template"]["spec"]
        cls.containers = {c["name"]: c for c in cls.pod["containers"]}
        cls.server = cls.pod["containers"][0]
        cls.volumes = {v["name"]: v for v in cls.pod["volumes"]}

    def test_an_overlay_applies_the_component(self):
        overlay = self.files[K8S / "overlays" / "shared-memory" / "kustomization.yaml"][0]
        refs = [
            (K8S / "overlays" / "shared-memory" / c).resolve()
            for c in overlay.get("components", [])
        ]
        self.assertIn(self.component.resolve(), refs)

    def test_server_args(self):
        self.check_server_args(self.server["args"])

    def test_client_container_calls_through_the_socket(self):
        self.assertIn("client", self.containers)
        client = self.containers["client"]
        self.assertIsNone(registry_host(client["image"]), client["image"])
        self.assertNotIn("nvidia.com/gpu", client.get("resources", {}).get("limits", {}))
        command = " ".join(client.get("command", []) + client.get("args", []))
        self.assertNotIn("--allow_shared_memory", command)

    def test_both_containers_mount_one_memory_dev_shm_and_the_socket_directory(self):
        directory = str(pathlib.PurePosixPath(SOCKET_PATH).parent)
        for path, medium in (("/dev/shm", "Memory"), (directory, None)):
            names = set()
            for container in self.containers.values():
                mounts = [m for m in container.get("volumeMounts", []) if m["mountPath"] == path]
                self.assertEqual(len(mounts), 1, f"{container['name']}: {path} not mounted")
                self.assertFalse(mounts[0].get("readOnly", False), path)
                names.add(mounts[0]["name"])
            self.assertEqual(len(names), 1, f"{path}: one volume shared by every container")
            empty_dir = self.volumes[names.pop()].get("emptyDir")
            self.assertIsNotNone(empty_dir, f"{path} should be an emptyDir")
            if medium:
                self.assertEqual(empty_dir.get("medium"), medium)
                self.assertIn("sizeLimit", empty_dir)

    def test_containers_run_as_the_same_non_root_user(self):
        pod_sc = self.pod.get("securityContext", {})
        for container in self.containers.values():
            sc = container.get("securityContext", {})
            self.assertEqual(
                sc.get("runAsUser", pod_sc.get("runAsUser")),
                IMAGE_UID,
                f"{container['name']}: objects are created 0600",
            )
            self.assertTrue(sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")))
            self.assertIs(sc.get("allowPrivilegeEscalation"), False)
            self.assertIs(sc.get("readOnlyRootFilesystem"), True)
            self.assertIn("ALL", sc.get("capabilities", {}).get("drop", []))
            limits = container.get("resources", {}).get("limits", {})
            self.assertIn("memory", limits, f"{container['name']}: no memory limit")


if __name__ == "__main__":
    print(f"gpucompute deploy checks in {REPO}")
    print(f"  gRPC port {GRPC_PORT} ({_grpc_from})")
    print(f"  metrics port {METRICS_PORT} ({_metrics_from})")
    print(f"  drain {SHUTDOWN_GRACE} s ({_grace_from})")
    if SERVER_DEFAULTS:
        for flag, where in sorted(server_flags_in_deploy_files().items()):
            if flag not in SERVER_DEFAULTS and flag != "flagfile":
                print(
                    f"  note: --{flag} ({', '.join(sorted(set(where)))}) is not defined in "
                    f"server/ yet; the server exits at start on an unknown flag"
                )
    unittest.main(verbosity=2)
