"""The layering is the architecture: no import cycle anywhere in the project, between
modules or between the server side's packages (``python -m import_graph`` from ``tests/``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import import_graph
from paths import TESTS


def test_the_project_has_no_import_cycle() -> None:
    result = subprocess.run([sys.executable, "-m", "import_graph"], cwd=TESTS,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "jupyter_gpuckpt.kernels -> " in result.stdout  # the graph was read


def test_a_cycle_is_found_through_type_checking_and_function_imports(tmp_path: Path) -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_graph.cycles(edges) == [["a", "b", "c"]]
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "one.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .two import X\n")
    (package / "two.py").write_text("def f():\n    from . import one\n")
    known = {"pkg", "pkg.one", "pkg.two"}
    assert import_graph.imports_of("pkg.one", package / "one.py", known) == {"pkg.two"}
    assert import_graph.imports_of("pkg.two", package / "two.py", known) == {"pkg.one"}


def test_the_server_packages_graph_joins_modules_by_package() -> None:
    edges = {"jupyter_gpuckpt.kernels.registry": {"jupyter_gpuckpt.placement.gpus", "jupyter_gpuckpt.kernels.records"},
             "jupyter_gpuckpt.placement.local": {"jupyter_gpuckpt.errors"}}
    assert import_graph.server_packages(edges) == {
        "jupyter_gpuckpt.kernels": {"jupyter_gpuckpt.placement"},
        "jupyter_gpuckpt.placement": {"jupyter_gpuckpt.errors"}}
