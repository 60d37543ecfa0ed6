"""The JupyterLab extension's own unit tests (labextension/test, node:test), run by pytest.

They need the extension's node_modules, which ``pip install -e .`` creates (jlpm install).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

LABEXTENSION = Path(__file__).parent.parent / "labextension"
JLPM = shutil.which("jlpm", path=str(Path(sys.executable).parent)) or shutil.which("jlpm")


@pytest.mark.skipif(not (LABEXTENSION / "node_modules").is_dir() or JLPM is None,
                    reason="labextension/node_modules or jlpm missing: pip install -e . builds them")
def test_frontend_unit_tests() -> None:
    result = subprocess.run([str(JLPM), "test"], cwd=LABEXTENSION, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "# fail 0" in result.stdout
