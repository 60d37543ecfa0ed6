"""What is not saved: each unpicklable variable is left out alone, and the user is told."""

from __future__ import annotations


def test_unpicklable_variables_are_skipped_alone_and_reported(kernels):
    k = kernels.start()
    k.ok("import socket, sqlite3, threading\nx = 1")
    k.ok("sock = socket.socket()")  # cell 3
    k.ok("fh = open('notes.txt', 'w')\ngen = (i for i in range(3))")  # cell 4
    k.ok("worker = threading.Thread(target=print)\ndb = sqlite3.connect(':memory:')")  # cell 5
    k.ok("keep = {'numbers': [1, 2, 3]}\nsock2 = sock")  # cell 6: rebinds sock under another name
    out = k.ok("%gpuckpt save")
    checkpoint = out.strip().splitlines()[-1]
    assert "Not saved (6):" in out
    assert "sock (socket.socket): TypeError: cannot pickle 'socket' object; re-run cell(s) 3" in out

    manifest = kernels.manifest(checkpoint)
    status = {v["name"]: v for v in manifest["variables"]}
    skipped = {n: (v["type"], v["cells"]) for n, v in status.items() if v["status"] == "skipped"}
    assert skipped == {
        "sock": ("socket.socket", [3]), "sock2": ("socket.socket", [3, 6]),  # sock2 is made from sock
        "fh": ("_io.TextIOWrapper", [4]), "gen": ("generator", [4]),
        "worker": ("threading.Thread", [5]), "db": ("sqlite3.Connection", [5]),
    }
    assert all(v["reason"] for v in status.values() if v["status"] == "skipped")
    assert {n for n, v in status.items() if v["status"] == "saved"} == {"socket", "sqlite3", "threading", "x", "keep"}

    fresh = kernels.start()
    report = fresh.ok(f"%gpuckpt restore {checkpoint}")
    assert "Restored 5 variables" in report
    assert "Not restored, they could not be saved (6):" in report
    assert "gen (generator): TypeError: cannot pickle 'generator' object; re-run cell(s) 4" in report
    assert report.strip().splitlines()[-1] == "Cells to re-run: 3, 4, 5, 6"
    assert fresh.value("(x, keep, 'sock' in dir(), 'gen' in dir())") == (1, {"numbers": [1, 2, 3]}, False, False)
