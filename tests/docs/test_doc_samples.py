"""The samples the docs show are today's output: every ``<!-- generated: NAME -->`` block in
README.md and docs/ equals what ``hack/gen-doc-samples.py`` produces now (the CLI's estimate,
the webhooks' answers, the memory model's table), so a doc cannot keep the output of an older
memory model. Fix a failure with ``PYTHONPATH=operator:testbed python hack/gen-doc-samples.py``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_doc_samples", ROOT / "hack" / "gen-doc-samples.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_generated_blocks_match_todays_output(gen: ModuleType) -> None:
    drifted = gen.drifted()
    assert not drifted, (
        f"generated samples in {', '.join(drifted)} differ from today's output: run "
        "PYTHONPATH=operator:testbed python hack/gen-doc-samples.py"
    )


def test_every_generator_has_a_block_in_the_docs(gen: ModuleType) -> None:
    text = "".join((ROOT / doc).read_text(encoding="utf-8") for doc in gen.DOCS)
    used = {m["name"] for m in gen.BLOCK.finditer(text)}
    assert used == set(gen.GENERATORS)


def test_a_stale_block_is_rewritten_and_an_unknown_one_refused(gen: ModuleType) -> None:
    stale = (
        "before\n<!-- generated: demo-size -->\nthe demo applies 9 examples\n"
        "<!-- end generated -->\nafter\n"
    )
    fresh = gen.render(stale)
    assert "9 examples" not in fresh
    assert fresh.startswith("before\n<!-- generated: demo-size -->\n")
    assert fresh.endswith("<!-- end generated -->\nafter\n")
    assert gen.render(fresh) == fresh
    with pytest.raises(gen.UnknownBlock, match="no-such-sample"):
        gen.render("<!-- generated: no-such-sample -->\nx\n<!-- end generated -->\n")
