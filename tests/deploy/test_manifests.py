"""deploy/: the Kubernetes manifests validated against the Kubernetes schemas (kubernetes-validate,
offline), the GitHub Actions workflow against the workflow schema that check-jsonschema ships, and
the pieces checked to fit together (shard count, secrets, entry point, container recipe)."""

from __future__ import annotations

import copy
import json
import re
import subprocess
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = sorted((DEPLOY / "k8s").glob("*.yaml"))
#: the oldest release the manifests are meant for (backoffLimitPerIndex GA, appArmorProfile), and the newest
K8S_VERSIONS = ("1.33", kubernetes_validate.latest_version())


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def by_kind() -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for p in K8S for d in docs(p)}


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("path", K8S, ids=lambda p: p.name)
def test_manifest_matches_the_kubernetes_schema(path: Path, version: str) -> None:
    for doc in docs(path):
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_validator_rejects_what_it_should() -> None:
    job = by_kind()["Job", "evalb-shards"]
    bad = copy.deepcopy(job)
    bad["spec"]["template"]["spec"]["containers"][0]["securityContext"]["procmount"] = "Unmasked"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSIONS[-1], strict=True)
    bad = copy.deepcopy(job)
    bad["spec"]["completions"] = "eight"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSIONS[-1], strict=True)


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def test_shards_and_finish_fit_together() -> None:
    k = by_kind()
    shards, finish = k["Job", "evalb-shards"], k["Job", "evalb-finish"]
    spec = shards["spec"]
    assert spec["completionMode"] == "Indexed"
    pod = spec["template"]["spec"]
    (c,) = pod["containers"]
    (f,) = finish["spec"]["template"]["spec"]["containers"]
    assert c["args"] == ["shard"] and f["args"] == ["finish"]
    assert int(_env(f)["EVALB_SHARDS"]) == spec["completions"]
    assert c["image"] == f["image"]
    assert pod["automountServiceAccountToken"] is False and pod["restartPolicy"] == "Never"
    # credentials come from the Secret, settings from the ConfigMap, both defined in config.yaml
    for container in (c, f):
        refs = {(next(iter(r)), next(iter(r.values()))["name"]) for r in container["envFrom"]}
        assert refs == {("secretRef", "evalb-credentials"), ("configMapRef", "evalb-settings")}
    secret = k["Secret", "evalb-credentials"]["stringData"]
    assert {"ANTHROPIC_API_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= set(secret)
    settings = k["ConfigMap", "evalb-settings"]["data"]
    assert settings["EVALB_S3_URL"].startswith("s3://") and "EVALB_S3_ENDPOINT" in settings
    grid = yaml.safe_load(k["ConfigMap", "evalb-grid"]["data"]["grid.yaml"])
    assert {"scenarios", "models", "reps"} <= set(grid)
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert _env(c)["EVALB_GRID"] == mounts["grid"] + "/grid.yaml"
    # what bubblewrap needs, and only in the shard pods; each is explained in docs/scaling.md
    sc = c["securityContext"]
    assert sc["capabilities"]["add"] == ["SYS_ADMIN"] and sc["procMount"] == "Unmasked"
    assert pod["hostUsers"] is False
    assert f["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    scaling = (ROOT / "docs" / "scaling.md").read_text()
    for word in ("SYS_ADMIN", "Unconfined", "procMount", "hostUsers", "privileged"):
        assert word in scaling, word


def test_github_workflow_matches_the_actions_schema_and_the_entry_point() -> None:
    path = DEPLOY / "github" / "evalb-grid.yml"
    assert not (ROOT / ".github" / "workflows" / path.name).exists()  # not run by this repo's CI
    schema = json.loads(
        resources.files("check_jsonschema")
        .joinpath("builtin_schemas/vendor/github-workflows.json")
        .read_text()
    )
    wf = yaml.safe_load(path.read_text())
    wf["on"] = wf.pop(True)  # YAML 1.1 reads the key `on` as true; GitHub reads it as "on"
    jsonschema.validate(wf, schema)
    broken = copy.deepcopy(wf)
    broken["jobs"]["shard"]["step"] = broken["jobs"]["shard"].pop("steps")  # a misspelt key
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)
    jobs = wf["jobs"]
    assert wf["env"]["SHARDS"] == len(jobs["shard"]["strategy"]["matrix"]["index"])
    assert jobs["shard"]["strategy"]["matrix"]["index"] == list(range(wf["env"]["SHARDS"]))
    assert jobs["finish"]["needs"] == "shard"
    runs = [s.get("run", "") for j in jobs.values() for s in j["steps"]]
    assert any(r.endswith("deploy/entrypoint.sh shard") for r in runs)
    assert any(r.endswith("deploy/entrypoint.sh finish") for r in runs)
    record = next(s for s in jobs["shard"]["steps"] if s.get("run", "").endswith("entrypoint.sh shard"))
    assert record["env"]["JOB_COMPLETION_INDEX"] == "${{ matrix.index }}"


def test_dockerfile_reuses_setup_and_copies_what_exists() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM \$\{BASE\}$", text, re.M) and "ARG BASE=python:3.11" in text
    assert "bubblewrap" in text and "RUN bash scripts/setup" in text
    assert 'ENTRYPOINT ["/usr/bin/tini", "--", "/opt/evalb/deploy/entrypoint.sh"]' in text
    for line in re.findall(r"^COPY (.+)$", text, re.M):
        for src in line.split()[:-1]:
            assert src == "." or (ROOT / src).exists(), src


def _entry(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(DEPLOY / "entrypoint.sh"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": f"{ROOT / '.venv' / 'bin'}:/usr/bin:/bin", **env},
    )


def test_entrypoint_refuses_a_missing_mode_or_shard_index(tmp_path: Path) -> None:
    assert subprocess.run(["bash", "-n", str(DEPLOY / "entrypoint.sh")]).returncode == 0
    out = _entry(env={"EVALB_WORK": str(tmp_path)})
    assert out.returncode == 2 and "usage: deploy/entrypoint.sh shard|finish" in out.stderr
    out = _entry("shard", env={"EVALB_WORK": str(tmp_path)})
    assert out.returncode != 0 and "JOB_COMPLETION_INDEX" in out.stderr
    out = _entry("finish", env={"EVALB_WORK": str(tmp_path)})
    assert out.returncode != 0 and "EVALB_SHARDS" in out.stderr
    assert not any(tmp_path.iterdir())
