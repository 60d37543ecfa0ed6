"""Object arrays of strings (pandas' object and python-storage string columns) are packed
into UTF-8 runs and come back element for element: the odd ones out (missing values, ``str``
subclasses, NULs, lone surrogates) with their own types.

With pyarrow installed, pandas 3's default ``str`` columns are Arrow-backed (see
test_arrow_columns.py), so the columns here ask for object and python storage by name."""

from __future__ import annotations

import json

from kernel_hooks.blobs import CHUNK_BYTES

BUILD = """
import numpy as np, pandas as pd

class Tag(str):
    pass

n = 300_000
names = [f"user-{i:07d}" for i in range(n)]
names[5:13] = ["héllo wörld ✓ 🐍", "lone \\ud800 surrogate", "nul \\x00 inside", "", None,
               float("nan"), Tag("tagged"), np.str_("numpy str")]
names[200_000] = pd.NA
mixed = np.array(names, dtype=object)
grid = np.asfortranarray(np.array(names[:100_000], dtype=object).reshape(400, 250))
frozen = mixed[:50_000].copy()
frozen.flags.writeable = False
mostly_ints = np.array(list(range(10_000)) + ["x"] * 100, dtype=object)
df = pd.DataFrame({"s": pd.Series([f"row {i}" if i % 1000 else None for i in range(n)], dtype=object),
                   "t": pd.array([f"t{i % 97}" if i % 777 else pd.NA for i in range(n)], dtype="string[python]")})
del names
"""

# Every element with its type, in memory order, as one digest.
DIGEST = ("__import__('hashlib').sha256(repr([(type(x).__name__, x) for x in {}.ravel(order='K').tolist()])"
          ".encode('utf-8', 'surrogatepass')).hexdigest()")
ARRAYS = ("mixed", "grid", "frozen", "mostly_ints", "df['s'].to_numpy()", "df['t'].to_numpy()")
FACTS = ("(grid.shape, grid.flags.f_contiguous, frozen.flags.writeable, str(df['s'].dtype), str(df['t'].dtype),"
         " df['t'].dtype.storage, int(df['s'].isna().sum()), int(df['t'].isna().sum()), type(mixed[11]).__name__, type(mixed[12]).__name__,"
         " mixed[200_000] is pd.NA, mixed[9] is None, mixed[6] == 'lone \\ud800 surrogate', mixed[7])")

SAVE = """print((lambda r: __import__("json").dumps({"id": r.id, "written": r.bytes_written,
    "total": r.bytes_total}))(__import__("kernel_hooks").save_checkpoint(get_ipython())))"""


def _facts(kernel) -> tuple:
    return (kernel.value(FACTS),) + tuple(kernel.value(DIGEST.format(a)) for a in ARRAYS)


def test_string_arrays_round_trip_element_for_element(kernels):
    saver = kernels.start()
    saver.ok(BUILD)
    before = _facts(saver)
    assert before[0][-1] == "nul \x00 inside"
    assert before[0][3:6] == ("object", "string", "python"), "the columns take the packed path, not Arrow's"
    checkpoint = saver.save()

    manifest = kernels.manifest(checkpoint)
    runs = [b for b in manifest["buffers"] if b["kind"] == "strings"]
    # mixed's 300,000 strings make 5 runs out of band, each read back on its own
    assert sum(b["var"] == "mixed" for b in runs) == 5
    assert manifest["pickle"]["nbytes"] < 1 << 20

    fresh = kernels.start()
    fresh.ok(f"%gpuckpt restore {checkpoint}")
    assert _facts(fresh) == before


def test_a_change_to_one_percent_of_the_strings_rewrites_one_run(kernels):
    k = kernels.start()
    k.ok("import numpy as np\nnames = np.array([f'user-{i:07d}' for i in range(1_000_000)], dtype=object)")
    full = json.loads(k.ok(SAVE).strip().splitlines()[-1])
    k.ok("names[500_000:510_000] = [f'renamed-{i}' for i in range(10_000)]")  # 1% of the strings
    changed = json.loads(k.ok(SAVE).strip().splitlines()[-1])
    # The renamed strings are shorter, so the rest of the run holding them moves: its
    # chunks from the change on are new. The other 15 runs (and the pickle) are not.
    run_bytes = (1 << 16) * len("user-0000000\x00")
    assert 0 < changed["written"] <= run_bytes + CHUNK_BYTES
    assert full["written"] >= 15 * run_bytes


REPEATED = """
import io, numpy as np, pandas as pd
rows = 200_000
csv = "city,user\\n" + "".join(f"city-{i % 7},user-{i:07d}\\n" for i in range(rows))
df = pd.read_csv(io.StringIO(csv), dtype=object)
codes = np.array([f"v{i % 3}" for i in range(100_000)], dtype=object)
codes[[10, 70_000]] = [None, "nul \\x00 here"]
del csv
"""
SHARING = ("(len({id(x) for x in df['city'].array._ndarray}), len({id(x) for x in df['user'].array._ndarray}),"
           " df['city'].tolist() == [f'city-{i % 7}' for i in range(rows)],"
           " df['user'].tolist() == [f'user-{i:07d}' for i in range(rows)],"
           " codes[:6].tolist(), codes[10], codes[70_000], codes[99_999])")


def test_repeated_strings_are_stored_once_and_come_back_shared(kernels):
    """A column read by ``pd.read_csv`` as objects shares one ``str`` per value: it comes back
    sharing them (one object per value and run), not as one object per row, and takes less disk."""
    saver = kernels.start()
    saver.ok(REPEATED)
    before = saver.value(SHARING)
    assert before[:2] == (7, 200_000), "read_csv shares each value's str"
    checkpoint = saver.save()
    manifest = kernels.manifest(checkpoint)
    runs = -(-200_000 // (1 << 16))
    city = [b for b in manifest["buffers"] if b["var"] == "df"]
    # The city runs' strings stay inline (7 values each) and their codes, 2 bytes a row, go
    # out of band; every user string is stored. Each column's last run (3,392 rows) is inline.
    assert sum(b["kind"] == "numpy" and b["nbytes"] == 2 << 16 for b in city) == runs - 1
    assert sum(b["kind"] == "strings" for b in city) == runs - 1
    assert all(b["nbytes"] > 12 << 16 for b in city if b["kind"] == "strings")

    fresh = kernels.start()
    fresh.ok(f"%gpuckpt restore {checkpoint}")
    after = fresh.value(SHARING)
    assert after[0] <= 7 * runs, "the city column should come back sharing its strings"
    assert after[1:] == before[1:]
