"""Arrow data (pyarrow arrays, chunked arrays, tables, record batches, and pandas' Arrow-backed
columns, pandas 3's default ``str`` among them) goes out of band buffer by buffer and comes
back with its types, offsets, chunks and values, its buffers shared as before; a kernel that
never imported pyarrow does not import it to save."""

from __future__ import annotations

import json

BUILD = """
import numpy as np, pandas as pd, pyarrow as pa

n = 100_000
words = [None if i % 11 == 0 else "" if i % 13 == 0 else f"héllo wörld ✓ 🐍 {i}" for i in range(n)]
strings = pa.array(words, pa.string())
large = pa.array(words, pa.large_string())
sliced = strings.slice(12_345, 50_000)
chunked = pa.chunked_array([strings.slice(0, 30_000), pa.array([f"chunk-{i}" for i in range(n)]),
                            strings.slice(70_000)])
table = pa.table({"id": np.arange(n), "x": np.arange(n) / 4, "flag": np.arange(n) % 3 == 0, "name": strings,
                  "city": pa.array([f"city-{i % 50}" for i in range(n)]).dictionary_encode(),
                  "tags": pa.array([[f"tag-{j}" for j in range(i % 4)] if i % 7 else None for i in range(n)],
                                   pa.list_(pa.string()))})
batch = table.slice(1_000, 60_000).to_batches()[0]
half = pd.DataFrame({"name": [f"user-{i:07d}" if i % 100 else None for i in range(n // 2)]})
df = pd.concat([half, half.assign(name=half["name"].str.upper())], ignore_index=True)
df["arrow"] = pd.Series(words, dtype="string[pyarrow]")
df["large"] = pd.Series(words, dtype=pd.ArrowDtype(pa.large_string()))
del words, half
"""

ARROW = ("strings", "large", "sliced", "chunked", "table", "batch")
DIGEST = "__import__('hashlib').sha256(repr({}).encode('utf-8')).hexdigest()"
VALUES = tuple(f"{name}.to_pylist()" for name in ARROW) + ("df.to_dict('list')",)
FACTS = ("(str(strings.type), str(large.type), strings.null_count, strings[5].as_py(), strings[11].as_py(),"
         " strings[13].as_py(), sliced.offset, len(sliced), chunked.num_chunks, [len(c) for c in chunked.chunks],"
         " str(table.schema), table['tags'].null_count, batch.num_rows, batch.column(3).offset, str(batch.schema),"
         " [str(t) for t in df.dtypes], [type(df[c].array).__name__ for c in df],"
         " df['name'].array.__arrow_array__().num_chunks, df['name'][50_001])")
SHARED = ("(sliced.buffers()[2].address == strings.buffers()[2].address,"
          " table['name'].chunk(0).buffers()[2].address == strings.buffers()[2].address)")
BIG = ("(sorted(b.size for b in strings.buffers() if b is not None and b.size >= 1 << 16),"
       " sum(size for _, size in {(b.address, b.size) for c in df for chunk in df[c].array.__arrow_array__().chunks"
       "                          for b in chunk.buffers() if b is not None and b.size >= 1 << 16}))")
SAVE = """print((lambda r: __import__("json").dumps({"id": r.id, "written": r.bytes_written,
    "total": r.bytes_total}))(__import__("kernel_hooks").save_checkpoint(get_ipython())))"""


def _facts(kernel) -> tuple:
    return (kernel.value(FACTS), kernel.value(SHARED)) + tuple(kernel.value(DIGEST.format(v)) for v in VALUES)


def test_arrow_data_round_trips_out_of_band(kernels):
    saver = kernels.start()
    saver.ok(BUILD)
    before = _facts(saver)
    facts = before[0]
    assert facts[3:6] == ("héllo wörld ✓ 🐍 5", None, "")
    assert facts[6:10] == (12_345, 50_000, 3, [30_000, 100_000, 30_000])
    assert facts[13] == 1_000, "the batch's columns are slices of the table's"
    assert facts[15:] == (["str", "string", "large_string[pyarrow]"],
                          ["ArrowStringArray", "ArrowStringArray", "ArrowExtensionArray"], 2, "USER-0000001")
    assert before[1] == (True, True)
    big = saver.value(BIG)
    saved = json.loads(saver.ok(SAVE).strip().splitlines()[-1])

    manifest = kernels.manifest(saved["id"])
    # strings' offsets and characters go out of band as they are (its 12 kB bitmap stays in
    # the pickle); the slice and the table's column share them, so they are stored once
    assert sorted(b["nbytes"] for b in manifest["buffers"] if b["var"] == "strings") == big[0]
    assert not [b for b in manifest["buffers"] if b["var"] == "sliced"]
    # the frame's columns too, chunk by chunk (not combined into a copy first)
    assert sum(b["nbytes"] for b in manifest["buffers"] if b["var"] == "df") == big[1] > 8_000_000
    assert sum(b["nbytes"] for b in manifest["buffers"]) > 15_000_000
    assert manifest["pickle"]["nbytes"] < 1 << 20
    # nothing changed: every buffer is found in the store already
    again = json.loads(saver.ok(SAVE).strip().splitlines()[-1])
    assert again["written"] < saved["total"] // 20

    fresh = kernels.start()
    fresh.ok(f"%gpuckpt restore {saved['id']}")
    assert _facts(fresh) == before


def test_a_kernel_without_pyarrow_does_not_import_it_to_save_or_restore(kernels):
    loaded = "tuple(m in __import__('sys').modules for m in ('pyarrow', 'pandas', 'kernel_hooks.codecs.arrow_arrays'))"
    saver = kernels.start()
    saver.ok("import numpy as np\nvalues = np.arange(1_000_000)\nnames = np.array([f'n{i}' for i in range(10_000)], dtype=object)")
    checkpoint = saver.save()
    assert saver.value(loaded) == (False, False, False)

    fresh = kernels.start()
    fresh.ok(f"%gpuckpt restore {checkpoint}")
    assert fresh.value("(int(values.sum()), names[9_999])") == (499_999_500_000, "n9999")
    assert fresh.value(loaded) == (False, False, False)


def test_arrow_columns_come_back_in_the_memory_they_are_read_into(kernels):
    """The restore reads each buffer into fresh memory and Arrow wraps that memory as it is: a
    copy anywhere on the way (pickled in band, combined into one chunk, rebuilt) would hold the
    columns' bytes twice at the peak. The columns then work as before: filtered, sliced,
    measured, appended to."""
    saver = kernels.start()
    saver.ok("""
import numpy as np, pandas as pd, pyarrow as pa

def strings(rows, seed):
    rng = np.random.default_rng(seed)
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(rng.integers(8, 72, rows), out=offsets[1:])
    data = rng.integers(97, 123, int(offsets[-1]), dtype=np.uint8)
    return pa.StringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(data))

frame = pd.DataFrame({"name": pd.Series(pd.arrays.ArrowStringArray(pa.chunked_array([strings(1 << 18, s) for s in (1, 2)])),
                                        dtype="string[pyarrow]"),
                      "note": pd.Series(pd.arrays.ArrowExtensionArray(pa.chunked_array([strings(1 << 19, 3)])))})
del strings
""")
    use = ("(int(frame['name'].str.len().sum()), frame.loc[frame['note'].str.startswith('ab'), 'name'].iloc[::500].tolist(),"
           " pd.concat([frame.iloc[:3], frame.iloc[-2:]])['note'].tolist(), [str(t) for t in frame.dtypes],"
           " frame['name'].array.__arrow_array__().num_chunks)")
    expected = saver.value(use)
    saved = json.loads(saver.ok(SAVE).strip().splitlines()[-1])
    assert saved["total"] > 40_000_000

    fresh = kernels.start()
    fresh.ok("import pandas as pd\nimport kernel_hooks.restoring")
    status = "int(next(line.split()[1] for line in open('/proc/self/status') if line.startswith('{}:'))) * 1024"
    fresh.ok("with open('/proc/self/clear_refs', 'w') as f:\n    f.write('5')")  # the peak is now the resident set
    before = fresh.value(status.format("VmRSS"))
    fresh.ok(f"%gpuckpt restore {saved['id']}")
    grown = fresh.value(status.format("VmHWM")) - before
    assert grown < 1.25 * saved["total"], (grown, saved["total"])
    assert fresh.value(use) == expected
    fresh.ok("frame.loc[len(frame)] = ['appended', 'row']")
    assert fresh.value("frame.iloc[-1].tolist()") == ["appended", "row"]
