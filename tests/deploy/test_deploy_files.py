"""What can be checked of ``docker/`` and ``deploy/`` without Docker or Kubernetes, beside
``make check-deploy`` (hadolint, compose config, helm, checkov): the compose topology and its
safe defaults, every COPY source exists, Ray is pinned only in pyproject (and the chart agrees),
images run as non-root, and every image's command runs here in the project's venv."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
CHART = REPO / "deploy" / "helm" / "shunter"
BIN = Path(sys.executable).parent
DOCKERFILES = sorted(DOCKER.glob("*.Dockerfile"))


def _compose() -> dict[str, Any]:
    out: dict[str, Any] = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    return out


def _ray_pin() -> str:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    deps = [d for extra in project["optional-dependencies"].values() for d in extra]
    pins = {re.sub(r"\[.*\]", "", d.split("==")[0]): d.split("==")[1] for d in deps if "==" in d}
    return pins["ray"]


def test_three_images_exist() -> None:
    assert {p.name for p in DOCKERFILES} == {
        "api.Dockerfile",
        "worker-cpu.Dockerfile",
        "worker-cuda.Dockerfile",
    }


def test_compose_topology_and_safe_defaults() -> None:
    c = _compose()
    assert {"postgres", "api", "ray-head", "ray-worker", "ray-worker-gpu"} <= set(c["services"])
    s = c["services"]
    env = s["api"]["environment"]
    assert env["SHUNTER_DATABASE_URL"].startswith("postgresql+psycopg://")
    assert env["SHUNTER_RAY_ADDRESS"] == "http://ray-head:8265"
    assert env["SHUNTER_RAY_GCS_ADDRESS"] == "ray-head:6380"  # the driver connects explicitly
    assert env["RAY_AUTH_MODE"] == "token"  # token auth stays on
    assert s["api"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert all(p.startswith("127.0.0.1:") for p in s["api"]["ports"])  # only the API, loopback
    for name in ("postgres", "ray-head", "ray-worker", "ray-worker-gpu"):
        assert "ports" not in s[name], f"{name} must not publish ports"
    for name in ("postgres", "api", "ray-head"):
        assert "healthcheck" in s[name], name
    head_cmd = " ".join(s["ray-head"]["command"])
    assert "--port=6380" in head_cmd and "6379" not in head_cmd  # a Redis may hold 6379
    assert "--address=ray-head:6380" in " ".join(s["ray-worker"]["command"])
    assert s["ray-worker-gpu"]["profiles"] == ["gpu"]
    # Storage is the bucket (issue #28): no volume written by one container and read by
    # another; each Ray container's caches are its own (anonymous volumes).
    assert env["SHUNTER_STORAGE"].startswith("s3://") and "minio-init" in s["api"]["depends_on"]
    for name in ("api", "ray-head", "ray-worker", "ray-worker-gpu"):
        named = [v.split(":")[0] for v in s[name]["volumes"] if ":" in v]
        writable = [v for v in s[name]["volumes"] if ":" in v and not v.endswith(":ro")]
        assert "storage" not in named and "hf-cache" not in named, name
        assert all(v.split(":")[0] in ("shunter-home",) for v in writable), name
    assert {"pgdata", "minio-data"} <= set(c["volumes"]) and "storage" not in c["volumes"]


def test_chart_asks_for_no_shared_volume() -> None:
    """The default chart stores in a bucket: no PersistentVolumeClaim but PostgreSQL's own
    (ReadWriteOnce); the HF and object caches are per node (emptyDir or hostPath)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["storage"]["uri"].startswith("s3://")
    assert "existingClaim" not in values["hfCache"] and "size" not in values["hfCache"]
    templates = CHART / "templates"
    assert "ReadWriteMany" not in (templates / "pvc.yaml").read_text()
    assert "if and (not .Values.storage.uri)" in (templates / "pvc.yaml").read_text()
    ray = (templates / "raycluster.yaml").read_text()
    assert "shunter.nodeDir" in ray and "persistentVolumeClaim" in ray  # only without a bucket


def test_dockerfiles_copy_existing_paths_run_non_root_and_pin_ray_nowhere() -> None:
    for df in DOCKERFILES:
        text = df.read_text()
        for src in re.findall(r"^COPY (?!--from)(\S+)", text, flags=re.M):
            assert (REPO / src).exists(), f"{df.name}: COPY {src} does not exist"
        assert re.search(r"^USER 10001$", text, flags=re.M), f"{df.name} must run as non-root"
        assert text.count("FROM ") >= 2, f"{df.name} must be multi-stage"
        assert not re.search(r"ray\S*==", text), f"{df.name}: Ray is pinned in pyproject only"
        for base in re.findall(r"^FROM (\S+)", text, flags=re.M):
            assert ":" in base and not base.endswith(":latest"), f"{df.name}: pin {base}"


def test_chart_ray_version_matches_pyproject() -> None:
    text = (CHART / "templates" / "raycluster.yaml").read_text()
    (version,) = re.findall(r'rayVersion: "([^"]+)"', text)
    assert version == _ray_pin()


def test_chart_defaults_are_safe() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["networkPolicies"]["enabled"] is True
    assert values["api"]["service"]["type"] == "ClusterIP"
    ray = (CHART / "templates" / "raycluster.yaml").read_text()
    assert (
        "serviceType: ClusterIP" in ray
        and "RAY_AUTH_MODE" in (CHART / "templates" / "_helpers.tpl").read_text()
    )
    assert not list((CHART / "templates").glob("*ingress*")), "nothing exposed by default"


def _ok(*cmd: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_image_commands_run_here() -> None:
    """Each image's CMD, run outside Docker in the project's venv (its --help: the real
    commands start long-running servers; those are played by the topology test)."""
    assert "--port" in _ok(str(BIN / "shunter"), "serve", "--help")
    assert "--block" in _ok(str(BIN / "ray"), "start", "--help")
    assert "status" in _ok(str(BIN / "ray"), "--help")
    _ok(sys.executable, "-c", "import worker.driver, launcher.ray_launcher, worker.train_fn")


def test_gcs_fault_tolerance_in_compose_and_the_chart() -> None:
    """Issue 32, item 3: compose backs the head's GCS with its own Redis (not published, on
    6379 inside the network only) and the workers wait for a restarted head; the chart turns
    KubeRay's gcsFaultToleranceOptions on when ray.gcsFaultTolerance.redisAddress is set."""
    s = _compose()["services"]
    head = s["ray-head"]
    assert head["environment"]["RAY_REDIS_ADDRESS"] == "redis:6379"
    assert head["environment"]["RAY_external_storage_namespace"]
    assert head["environment"]["RAY_AUTH_MODE"] == "token"  # the anchor's keys are kept
    assert head["depends_on"]["redis"]["condition"] == "service_healthy"
    assert "ports" not in s["redis"] and "healthcheck" in s["redis"]
    for name in ("ray-worker", "ray-worker-gpu"):
        assert int(s[name]["environment"]["RAY_gcs_rpc_server_reconnect_timeout_s"]) >= 300
    values = yaml.safe_load((CHART / "values.yaml").read_text())["ray"]["gcsFaultTolerance"]
    assert values["redisAddress"] == ""  # off unless an HA Redis is named
    ray = (CHART / "templates" / "raycluster.yaml").read_text()
    block = ray.split("gcsFaultToleranceOptions:", 1)
    assert len(block) == 2 and "if .redisAddress" in block[0].rsplit("\n", 3)[-2]
    assert "redisAddress:" in block[1] and "externalStorageNamespace:" in block[1]
