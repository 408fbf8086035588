"""The analysis notebooks are jupytext percent scripts and execute without error on the synthetic fixture records."""

from __future__ import annotations

import jupytext
import pytest

from analysis.execute import execute_notebook, notebooks
from analysis.synthetic import write_fixture_set

EXPECTED = {
    "ablations_matched_skip": "largest loss at matched skip: no_",
    "alpha_sweep": "monotone in α: True",
    "memory_dim": "differs",
    "routing_behaviour": "layers by mean FFN usage",
}


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    root = tmp_path_factory.mktemp("records")
    write_fixture_set(root)
    return root


def test_there_is_a_notebook_per_question():
    assert sorted(p.stem for p in notebooks()) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_notebook_is_paired_percent_script(name):
    source = next(p for p in notebooks() if p.stem == name)
    text = source.read_text()
    assert "formats: ipynb,py:percent" in text and "# %% [markdown]" in text
    nb = jupytext.read(source)
    assert nb.cells[0].cell_type == "markdown" and "**Question.**" in nb.cells[0].source


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_notebook_executes_on_fixture_records(name, records, tmp_path):
    source = next(p for p in notebooks() if p.stem == name)
    out = tmp_path / f"{name}.ipynb"
    nb = execute_notebook(source, [records], out)
    assert out.is_file()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    text = "\n".join(
        str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", ""))
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
    )
    assert EXPECTED[name] in text
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert any("image/png" in o.get("data", {}) for o in outputs)
