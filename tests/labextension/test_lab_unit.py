"""The JupyterLab extension's own unit tests (labextension/test, node:test), run by pytest.

They need the JavaScript workspace's node_modules (at the top level, beside package.json),
which ``pip install -e .`` creates (jlpm install).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from paths import ROOT

JLPM = shutil.which("jlpm", path=str(Path(sys.executable).parent)) or shutil.which("jlpm")


def test_frontend_unit_tests() -> None:
    if not (ROOT / "node_modules").is_dir() or JLPM is None:
        pytest.fail("node_modules or jlpm is missing: `pip install -e .` installs them (jlpm install)", pytrace=False)
    # the workspace root's `test` script runs labextension's
    result = subprocess.run([str(JLPM), "test"], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "# fail 0" in result.stdout
    assert "# pass 0" not in result.stdout
