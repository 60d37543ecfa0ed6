"""Kishu's library coverage cases, read by their own definition from Kishu's sdist.

Kishu 0.3.4's sdist ships them as data: ``coverage/coverage_test_cases.py`` holds
``LIB_COVERAGE_TEST_CASES``, a list of ``LibCoverageTestCase(module_name, class_name,
var_name, import_statements, var_declare_statements, var_modify_statements)``. They are not
copied here: ``python3 tests/library_cases.py fetch`` (run by .ci/run after the install)
downloads the sdist with pip, checks its hash and extracts that one file into
``.cache/kishu-0.3.4/``, so the tests never touch the network.

Which cases run is decided here, by rule (:func:`exclusion`): not those of libraries the
test extra does not install, nor those that download data when they run.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

KISHU_SDIST = "kishu-0.3.4.tar.gz"
KISHU_SDIST_SHA256 = "a5bd3960c4da7f133c758b1760f7189d9d6b5f7837768bb6ccb4fb65ca617096"
"""The sdist's hash as PyPI lists it."""
MEMBER = "kishu-0.3.4/coverage/coverage_test_cases.py"
MEMBER_SHA256 = "560143905bf9157b9d852bf4f6cc711887dbe8d9b3ee5ca2a89067156f1a1738"
"""The extracted file's hash, so a cache edited by hand or left from another sdist is refused."""
CACHE = Path(__file__).resolve().parents[1] / ".cache" / "kishu-0.3.4" / "coverage_test_cases.py"
FETCH_COMMAND = "python3 tests/library_cases.py fetch"

NOT_INSTALLED = frozenset({"tensorflow", "keras", "prophet", "pyspark", "gym", "catboost", "gensim", "llm", "dataprep"})
"""Kishu's ``module_name`` of the cases whose libraries the test extra leaves out (too big, or
conflicting with what it installs)."""
DOWNLOADS = re.compile(
    r"\b(?:load_dataset|fetch_\w+|from_pretrained|pipeline|urlopen|urlretrieve)\("  # seaborn, sklearn, HF hub
    r"|\bdatasets\.(?:ascent|face|electrocardiogram)\("  # scipy.datasets: pooch fetches them on first use
)
"""Calls that fetch data from the network when the case runs: no network while the tests run."""


class CasesMissing(Exception):
    """The cases file was not fetched, or is not the pinned one."""


@dataclass(frozen=True)
class LibraryCase:
    """One of Kishu's cases, numbered by its place in ``LIB_COVERAGE_TEST_CASES``."""

    index: int
    library: str
    class_name: str
    var: str
    imports: tuple[str, ...]
    declares: tuple[str, ...]
    modifies: tuple[str, ...]

    @property
    def statements(self) -> tuple[str, ...]:
        return self.imports + self.declares + self.modifies


def exclusion(case: LibraryCase) -> str | None:
    """Why ``case`` does not run here (every reason that applies), or None if it runs."""
    reasons = []
    if case.library in NOT_INSTALLED:
        reasons.append(f"{case.library} is not installed")
    downloads = sorted({m.group(0) for s in case.statements for m in DOWNLOADS.finditer(s)})
    if downloads:
        reasons.append(f"downloads data at run time ({', '.join(downloads)})")
    return "; ".join(reasons) or None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def load_cases(path: Path = CACHE) -> list[LibraryCase]:
    """Every active case of the fetched file, by executing Kishu's own definition of them.

    Raises
    ------
    CasesMissing
        The file is absent or differs from the pinned one; the message says what to run.
    """
    if not path.is_file():
        raise CasesMissing(f"Kishu's cases are not fetched ({path} is missing): run `{FETCH_COMMAND}`")
    if _sha256(path) != MEMBER_SHA256:
        raise CasesMissing(f"{path} is not the file of {KISHU_SDIST}: run `{FETCH_COMMAND}` again")
    spec = importlib.util.spec_from_file_location("kishu_coverage_test_cases", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [
        LibraryCase(i, c.module_name, c.class_name, c.var_name, tuple(c.import_statements),
                    tuple(c.var_declare_statements), tuple(c.var_modify_statements))
        for i, c in enumerate(module.LIB_COVERAGE_TEST_CASES)
    ]


def fetch(target: Path = CACHE) -> None:
    """Download Kishu's sdist with pip (which checks the pinned hash), check it again, and
    extract the cases file alone into ``target``, replacing it atomically."""
    with tempfile.TemporaryDirectory() as tmp:
        requirement = Path(tmp) / "requirements.txt"
        requirement.write_text(f"kishu==0.3.4 --hash=sha256:{KISHU_SDIST_SHA256}\n")
        # --no-build-isolation: pip prepares the sdist's metadata with the setuptools already
        # here, rather than installing Kishu's build requirements (numpy among them) first.
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary=kishu",
                        "--no-build-isolation", "--require-hashes", "-r", str(requirement), "--dest", tmp],
                       check=True)
        sdist = Path(tmp) / KISHU_SDIST
        if _sha256(sdist) != KISHU_SDIST_SHA256:
            raise CasesMissing(f"{KISHU_SDIST} does not have the pinned sha256 {KISHU_SDIST_SHA256}")
        with tarfile.open(sdist) as tar:
            member = tar.extractfile(MEMBER)
            if member is None:
                raise CasesMissing(f"{KISHU_SDIST} has no {MEMBER}")
            data = member.read()
    if hashlib.sha256(data).hexdigest() != MEMBER_SHA256:
        raise CasesMissing(f"{MEMBER} in {KISHU_SDIST} does not have the pinned sha256 {MEMBER_SHA256}")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    partial.write_bytes(data)
    partial.replace(target)


if __name__ == "__main__":
    if sys.argv[1:] != ["fetch"]:
        sys.exit(f"usage: {FETCH_COMMAND}")
    fetch()
    print(f"Kishu's coverage cases: {CACHE}")
