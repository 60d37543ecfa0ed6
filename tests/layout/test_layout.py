"""The packages keep to their parts: the server never loads the engine, and importing the
engine loads nothing until it is used."""

from __future__ import annotations

import json
import subprocess
import sys


def _loaded_after(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nimport json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    return set(json.loads(out.stdout))


def test_the_server_side_does_not_import_the_engine() -> None:
    loaded = _loaded_after("import jupyter_gpuckpt.extension.app, jupyter_gpuckpt.extension.handlers, jupyter_gpuckpt.cli.main, "
                           "jupyter_gpuckpt.cli.doctor")
    assert "gpuckpt_store" in loaded
    assert not {m for m in loaded if m.split(".")[0] in ("kernel_hooks", "cloudpickle", "blake3")}


def test_importing_kernel_hooks_loads_nothing_else() -> None:
    loaded = _loaded_after("import kernel_hooks")
    assert {m for m in loaded if m.startswith(("kernel_hooks", "gpuckpt_store"))} == {"kernel_hooks"}
    assert not {m for m in loaded if m.split(".")[0] in ("cloudpickle", "blake3", "numpy")}


def test_the_tests_are_in_folders_named_for_the_parts_they_test() -> None:
    """tests/<part>/test_*.py, where a part is a package of the server side, the kernel side
    (kernel_hooks), the store, the labextension, the docs, or the layout itself; the top of tests/ keeps
    only the shared fixtures."""
    from paths import ROOT, TESTS

    server_side = {p.name for p in (ROOT / "jupyter_gpuckpt").iterdir() if (p / "__init__.py").exists()}
    parts = server_side - {"labextension"} | {"kernel_hooks", "store", "labextension", "layout", "docs"}
    assert not list(TESTS.glob("test_*.py")), "a test module at the top of tests/"
    folders = {p.parent.name for p in TESTS.glob("*/test_*.py")}
    assert folders <= parts, folders - parts
    assert {"kernels", "placement", "staging", "operations", "policy", "extension", "cli"} <= folders
