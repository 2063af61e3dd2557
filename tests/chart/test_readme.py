"""The README's Helm and GitOps commands, followed as a new user would, are right for the chart:
the chart path, every --set key (exists in values.yaml, passes the schema), the object names
kubectl is pointed at, and the example files with their names and namespaces."""

from __future__ import annotations

import re
import shlex
from typing import Any

import pytest
import yaml

from .conftest import CHART, ROOT, Render, by_kind, helm

README = (ROOT / "README.md").read_text()
CHART_README = (CHART / "README.md").read_text()
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())


def section(text: str, title: str) -> str:
    assert f"\n## {title}\n" in text, f"README has no '## {title}' section"
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def commands(text: str) -> list[list[str]]:
    """Shell commands of the ```sh blocks, continuation lines joined, comments dropped."""
    found = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                found.append(words)
    return found


def option(words: list[str], *names: str) -> str | None:
    for i, word in enumerate(words):
        for name in names:
            if word == name:
                return words[i + 1]
            if word.startswith(f"{name}="):
                return word.split("=", 1)[1]
    return None


def helm_commands(text: str) -> list[list[str]]:
    return [w for w in commands(text) if w[0] == "helm" and w[1] in {"install", "upgrade"}]


DOCS = {"README": section(README, "Install with Helm"), "chart README": CHART_README}


@pytest.mark.parametrize("doc", list(DOCS))
def test_helm_commands_are_right_for_the_chart(render: Render, doc: str) -> None:
    cmds = helm_commands(DOCS[doc])
    assert cmds, f"{doc} shows no helm install command"
    for words in cmds:
        flags_with_values = {"--namespace", "-n", "--set", "--set-json", "-f", "--values"}
        positional = [
            w
            for i, w in enumerate(words[2:], start=2)
            if not w.startswith("-") and words[i - 1] not in flags_with_values
        ]
        release, chart_path = positional[:2]
        assert (ROOT / chart_path).resolve() == CHART.resolve(), chart_path
        helm.validate_release_name(release)
        namespace = option(words, "--namespace", "-n")
        assert namespace and "--create-namespace" in words
        values: dict[str, Any] = {}
        for i, word in enumerate(words):
            parse = {"--set": helm.parse_set_string, "--set-json": helm.parse_set_json}.get(word)
            if parse:
                assignment = words[i + 1]
                key = assignment.split("=", 1)[0]
                node = DEFAULTS
                for part in key.split("."):
                    assert isinstance(node, dict) and part in node, f"{key} is not in values.yaml"
                    node = node[part]
                merge(values, parse(assignment))
        with helm.Chart.load(CHART) as chart:
            chart.validate_schema(values)
        # No image is published: a command that keeps the default repository cannot pull it
        # (unless it runs no operator pod: replicaCount 0, the operator run outside the cluster).
        if values.get("replicaCount") != 0:
            assert "repository" in values.get("image", {}), f"{doc}: {shlex.join(words)}"
        kinds = {d["kind"] for d in render(values, name=release, namespace=namespace)}
        assert "Deployment" in kinds


def merge(into: dict[str, Any], update: dict[str, Any]) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = value


def test_rollout_status_names_the_rendered_deployment(render: Render) -> None:
    (install,) = [w for w in helm_commands(DOCS["README"]) if w[1] == "install"]
    rendered = render(name=install[2], namespace=option(install, "--namespace"))
    (deployment,) = by_kind(rendered, "Deployment")
    rollout = [w for w in commands(DOCS["README"]) if "rollout" in w]
    assert rollout and rollout[0][-1] == f"deployment/{deployment['metadata']['name']}"


def example(path: str) -> dict[str, Any]:
    file = ROOT / path
    assert file.is_file(), (
        f"{path} is referenced by the README but missing (examples/ from the offline branch)"
    )
    doc: dict[str, Any] = yaml.safe_load(file.read_text())
    assert doc["apiVersion"] == "gpusizer.dev/v1alpha1" and doc["kind"] == "GPUWorkload"
    return doc


def test_examples_and_waits_match() -> None:
    """Each `kubectl wait ... gpuworkload/NAME -n NS` names an example the README applied."""
    text = section(README, "Install with Helm") + section(README, "GitOps")
    applied = {}
    for words in commands(text):
        if words[:2] == ["kubectl", "apply"]:
            doc = example(option(words, "-f") or "")
            applied[doc["metadata"]["name"]] = doc["metadata"]["namespace"]
    assert applied
    waits = [w for w in commands(text) if w[:2] == ["kubectl", "wait"]]
    assert waits
    for words in waits:
        target = next(w for w in words if w.startswith("gpuworkload/"))
        name = target.split("/", 1)[1]
        assert applied.get(name) == option(words, "-n", "--namespace"), words
    # The GitOps step's variables point at an applied example too.
    match = re.search(r"ns=(\S+) name=(\S+)", section(README, "GitOps"))
    assert match and applied.get(match.group(2)) == match.group(1)


def test_gitops_section_points_at_real_files() -> None:
    text = section(README, "GitOps")
    for path in re.findall(r"\]\(([^)#]+)\)", text):
        assert (ROOT / path).is_file(), path
    gitops = (ROOT / "docs" / "gitops.md").read_text()
    assert "resource.customizations.health.gpusizer.dev_GPUWorkload" in gitops
    assert "hack/argocd-health.lua" in gitops
    assert "Rejected" in text and "kubectl wait" in text


def test_chart_readme_documents_every_template() -> None:
    """Each kind the chart can render appears in the chart README's object table."""
    table = section(CHART_README, "What gets created")
    for template in sorted((CHART / "templates").glob("*.yaml")):
        for kind in re.findall(r"^kind: (\w+)", template.read_text(), flags=re.M):
            assert kind in table, f"{kind} ({template.name}) is missing from the chart README"


def test_notes_example_exists() -> None:
    notes = (CHART / "templates" / "NOTES.txt").read_text()
    for path in re.findall(r"-f (examples/\S+\.yaml)", notes):
        example(path)
