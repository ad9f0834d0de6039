"""Every manifest under deploy/k8s/ against the schemas of a pinned Kubernetes version.

``kubernetes-validate`` ships the OpenAPI schemas of each Kubernetes release inside the
package, so this runs offline; strict mode also rejects keys the schema does not know (a
misspelt ``readinessProbe`` would otherwise pass silently). The InferencePool is a CRD of the
Gateway API Inference Extension, checked against the fields of its v1 schema written here.
Beyond the schema: every container of a workload has requests and limits and a security
context, runs as non-root, and every long-running one has probes; kustomization.yaml lists
files that exist, and leaves out only the templates and the InferencePool.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
KUBERNETES_VERSION = "1.33.0"  # a current release; the package holds the schemas of each
NOT_RESOURCES = {"fleet.yaml", "kustomization.yaml"}  # the fleet file; kustomize's own
WORKLOADS = {"Deployment", "DaemonSet", "StatefulSet", "Job"}
LONG_RUNNING = {"Deployment", "DaemonSet", "StatefulSet"}
# Long-running containers that serve nothing a probe could ask, and why (the manifest says so).
NO_PROBES = {
    "agent.yaml:DaemonSet/agent": "exits on a fault; a hung agent shows as a silent endpoint",
    "beat.yaml:Deployment/beat": "one scheduler serving nothing; a hung one stops the loop's ticks",
}

# inference.networking.k8s.io/v1 InferencePool: the fields its CRD requires and constrains.
INFERENCE_POOL = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "targetPorts", "endpointPickerRef"],
            "properties": {
                "selector": {
                    "type": "object",
                    "required": ["matchLabels"],
                    "properties": {"matchLabels": {"type": "object", "minProperties": 1}},
                },
                "targetPorts": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 8,
                    "items": {
                        "type": "object",
                        "required": ["number"],
                        "properties": {
                            "number": {"type": "integer", "minimum": 1, "maximum": 65535}
                        },
                    },
                },
                "endpointPickerRef": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name", "port"],
                    "properties": {
                        "group": {"type": "string"},
                        "kind": {"type": "string"},
                        "name": {"type": "string", "minLength": 1},
                        "port": {
                            "type": "object",
                            "required": ["number"],
                            "properties": {
                                "number": {"type": "integer", "minimum": 1, "maximum": 65535}
                            },
                        },
                        "failureMode": {"enum": ["FailOpen", "FailClose"]},
                    },
                },
            },
        }
    },
}


def manifests() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name in NOT_RESOURCES:
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                found.append((f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc))
    return found


MANIFESTS = manifests()


def containers(doc: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any], bool]]:
    """Each container of a workload, its pod spec and whether it is an init container."""
    pod = doc["spec"]["jobTemplate"]["spec"] if doc["kind"] == "CronJob" else doc["spec"]
    spec = pod["template"]["spec"]
    return [(c, spec, True) for c in spec.get("initContainers", [])] + [
        (c, spec, False) for c in spec["containers"]
    ]


@pytest.mark.parametrize(("name", "doc"), MANIFESTS, ids=[n for n, _ in MANIFESTS])
def test_the_manifest_validates_against_the_pinned_schemas(name: str, doc: dict[str, Any]) -> None:
    if doc["kind"] == "InferencePool":
        assert doc["apiVersion"] == "inference.networking.k8s.io/v1"
        jsonschema.validate(doc, INFERENCE_POOL)
        return
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


WORKLOAD_DOCS = [(n, d) for n, d in MANIFESTS if d["kind"] in WORKLOADS]


@pytest.mark.parametrize(("name", "doc"), WORKLOAD_DOCS, ids=[n for n, _ in WORKLOAD_DOCS])
def test_every_container_has_resources_a_security_context_and_probes(
    name: str, doc: dict[str, Any]
) -> None:
    for container, spec, init in containers(doc):
        where = f"{name} container {container['name']}"
        resources = container.get("resources", {})
        assert {"cpu", "memory"} <= set(resources.get("requests", {})), f"{where}: requests"
        assert "memory" in resources.get("limits", {}), f"{where}: memory limit"
        context = container.get("securityContext", {})
        assert context.get("allowPrivilegeEscalation") is False, f"{where}: privilege escalation"
        assert context.get("capabilities", {}).get("drop") == ["ALL"], f"{where}: capabilities"
        non_root = context.get("runAsNonRoot", spec.get("securityContext", {}).get("runAsNonRoot"))
        assert non_root is True, f"{where}: runAsNonRoot"
        if doc["kind"] in LONG_RUNNING and not init and name not in NO_PROBES:
            assert "livenessProbe" in container, f"{where}: livenessProbe"
            if container.get("ports"):
                assert "readinessProbe" in container, f"{where}: readinessProbe"


def test_kustomization_lists_every_manifest_but_the_templates_and_the_pool() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    assert all((K8S / name).exists() for name in listed), listed
    for generator in kustomization.get("configMapGenerator", []):
        assert all((K8S / f).exists() for f in generator.get("files", [])), generator
    unlisted = {p.name for p in K8S.glob("*.yaml")} - listed - NOT_RESOURCES
    assert {n for n in unlisted if not n.endswith(".example.yaml")} == {"inferencepool.yaml"}
