"""hack/kind-e2e.sh cannot run here (it needs Docker); check what can be checked without it:
shell syntax, the Docker warning in its header, the fake GPU nodes against the catalog, and the
chart and object names it relies on."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from gpu_sizer.catalog import DEFAULT_CATALOG

from .conftest import ROOT, Render, one

SCRIPT = ROOT / "hack" / "kind-e2e.sh"
TEXT = SCRIPT.read_text()
MIB = 1 << 20


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_shell_syntax() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_header_says_it_needs_docker() -> None:
    header = TEXT.split("set -euo pipefail", 1)[0]
    assert "NEEDS DOCKER" in header and "does not run on machines without Docker" in header


def test_fake_gpu_nodes_are_two_catalog_classes() -> None:
    nodes = re.findall(r'^label_gpu_node "\$\{WORKERS\[\d\]\}" (\S+) (\d+)$', TEXT, flags=re.M)
    assert len(nodes) == 2
    classes = set()
    for product, mib in nodes:
        matches = [c for c in DEFAULT_CATALOG if product in c.products]
        assert matches, f"{product} is in no catalog class"
        assert matches[0].memory_bytes // MIB == int(mib), f"{product}: GFD memory {mib} MiB"
        classes.add(matches[0].name)
    assert len(classes) == 2


def test_script_uses_the_charts_names(render: Render) -> None:
    docs = render(name="gpu-sizer", namespace="gpu-sizer")
    assert "RELEASE=gpu-sizer" in TEXT and "NAMESPACE=gpu-sizer" in TEXT
    assert one(docs, "Deployment")["metadata"]["name"] == "gpu-sizer"
    webhook = one(docs, "ValidatingWebhookConfiguration")["metadata"]["name"]
    assert webhook == "gpu-sizer-webhook" and '"$RELEASE-webhook"' in TEXT
    assert 'helm upgrade --install "$RELEASE" charts/gpu-sizer' in TEXT
    assert 'mode"] = "Disabled"' in TEXT
    assert "GPU_SIZER_E2E_KUBECONFIG=" in TEXT and "pytest tests/e2e" in TEXT
