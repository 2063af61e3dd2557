"""The files of examples/: one GPUWorkload each, and the namespaces they live in.

``00-namespaces.yaml`` sorts first so that ``kubectl apply -f examples/`` creates the namespaces
before the workloads; tests that read the workloads take :data:`WORKLOAD_FILES`.
"""

from __future__ import annotations

from pathlib import Path

EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"
#: The Namespaces of the examples, applied first by ``kubectl apply -f examples/``.
NAMESPACES_FILE = EXAMPLES_DIR / "00-namespaces.yaml"
#: Every example workload file, sorted by name.
WORKLOAD_FILES = sorted(p for p in EXAMPLES_DIR.glob("*.yaml") if p != NAMESPACES_FILE)
