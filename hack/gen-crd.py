#!/usr/bin/env python3
"""Write the GPUWorkload and GPUMeasurement CRDs (from the pydantic models) to crds/ and the chart.

Usage (from the repository root): ``PYTHONPATH=operator python hack/gen-crd.py [--check]``.
``--check`` writes nothing and exits 1 when any file differs from the models (CI's drift test
does the same in tests/api/test_crd.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpu_sizer.api.crd import CRD_NAME, RECORD_CRD_NAME, crd_yaml, record_crd_yaml

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = (ROOT / "crds", ROOT / "charts" / "gpu-sizer" / "crds")
DOCUMENTS = ((CRD_NAME, crd_yaml), (RECORD_CRD_NAME, record_crd_yaml))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report drift; exit 1 on it")
    args = parser.parse_args()
    wanted = {folder / f"{name}.yaml": render() for folder in FOLDERS for name, render in DOCUMENTS}
    stale = [
        t for t, text in wanted.items() if not t.exists() or t.read_text(encoding="utf-8") != text
    ]
    if args.check:
        for target in stale:
            print(f"{target.relative_to(ROOT)}: differs from gpu_sizer.api; run hack/gen-crd.py")
        return 1 if stale else 0
    for target, text in wanted.items():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        print(f"wrote {target.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
