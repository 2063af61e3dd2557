#!/usr/bin/env python3
"""Write the GPUWorkload CRD, generated from the pydantic models, to crds/ and the Helm chart.

Usage (from the repository root): ``PYTHONPATH=operator python hack/gen-crd.py [--check]``.
``--check`` writes nothing and exits 1 when either file differs from the models (CI's drift test
does the same in tests/api/test_crd.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpu_sizer.api.crd import CRD_NAME, crd_yaml

ROOT = Path(__file__).resolve().parent.parent
TARGETS = (
    ROOT / "crds" / f"{CRD_NAME}.yaml",
    ROOT / "charts" / "gpu-sizer" / "crds" / f"{CRD_NAME}.yaml",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report drift; exit 1 on it")
    args = parser.parse_args()
    text = crd_yaml()
    stale = [t for t in TARGETS if not t.exists() or t.read_text(encoding="utf-8") != text]
    if args.check:
        for target in stale:
            print(f"{target.relative_to(ROOT)}: differs from gpu_sizer.api; run hack/gen-crd.py")
        return 1 if stale else 0
    for target in TARGETS:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        print(f"wrote {target.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
