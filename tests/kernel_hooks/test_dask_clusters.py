"""dask.distributed comes back working: a LocalCluster of the same spec started again, its
Client connected to it, and persisted collections and futures with their results in the
restored cluster's memory, so ``compute()`` gives what it gave before the save (it failed with
"Missing dependency" while the array was reported restored). A client whose scheduler does not
answer is reported not restored, with the reason and its cells, and so is every collection
that needs it. Nothing starts before the restore commits; the restored kernel's exit ends
the cluster's worker processes.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fault_fixtures import buffer_blob, flip_byte, load_manifest
from kernel_processes import Kernel, KernelFactory

pytest.importorskip("distributed")

CLUSTER = """
import os, numpy as np, pandas as pd, dask.array as da, dask.dataframe as dd
from dask.distributed import Client, LocalCluster, default_client, wait
cluster = LocalCluster(n_workers=2, threads_per_worker=2, processes={processes}, memory_limit="400 MiB",
                       dashboard_address=None)
client = Client(cluster)
"""  # cell 2
DATA = """
x = da.random.RandomState(0).random_sample((400, 300), chunks=(100, 300)).persist()
frame = dd.from_pandas(pd.DataFrame({"a": np.arange(40), "b": np.arange(40) % 3}), npartitions=4).persist()
y = x * 2 + 1
total = client.submit(sum, range(10))
wait([x, frame, total])
"""  # cell 3
SPEC = ("(cluster.processes, sorted((w['nthreads'], w['memory_limit']) for w in "
        "client.scheduler_info()['workers'].values()), sorted(type(w).__name__ for w in cluster.workers.values()))")
VALUES = ("(float(x.sum().compute()), float(y.mean().compute()), "
          "frame.groupby('b').a.sum().compute().to_dict(), total.result())")
REPORT = "import json, kernel_hooks\nprint(json.dumps(kernel_hooks.current().last_restore.to_json()))"


def _report(kernel: Kernel) -> dict[str, Any]:
    return dict(json.loads(kernel.ok(REPORT)))


def test_a_threaded_cluster_its_client_and_persisted_data_come_back_working(kernels: KernelFactory) -> None:
    k = kernels.start()
    k.ok(CLUSTER.format(processes=False))
    k.ok(DATA)
    k.ok("import time\nslow = client.submit(time.sleep, 60, pure=False)\n"  # cell 4
         "own = Client(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None, "
         "set_as_default=False)")
    spec, values = k.value(SPEC), k.value(VALUES)
    assert spec == (False, [(2, 400 * 2**20)] * 2, ["Worker", "Worker"])
    out = k.ok("%gpuckpt save")
    assert ("slow (distributed.client.Future): TypeError: a dask Future that is pending cannot be saved: only a "
            "finished one's result is in the cluster to take; wait for it (distributed.wait) before saving; "
            "re-run cell(s) 4") in out
    checkpoint = out.strip().splitlines()[-1]

    fresh = kernels.start()
    text = fresh.ok(f"%gpuckpt restore {checkpoint}")
    assert re.match(r"Restored \d+ variables \(6 rebuilt: cluster, client, x, frame, total, own; [^)]+\) from checkpoint "
                    rf"{checkpoint} in [\d.]+ s; 1 not restored\.\n", text), text
    report = _report(fresh)
    assert report["started_again"] == ["cluster", "client", "x", "frame", "total", "own"]
    assert {"x", "y", "cluster", "client"} <= set(report["restored"]) and "slow" not in report["restored"]
    assert report["counts"]["rebuilt"] == 6 and report["counts"]["not_restored"] == 1
    assert report["not_set_up"] == [] and report["cells_to_rerun"] == [4]

    assert fresh.value(SPEC) == spec
    assert fresh.value(VALUES) == values  # failed with "Missing dependency" before
    # the client is the restored cluster's, the default one, and the data is in its workers' memory
    assert fresh.value("(client.cluster is cluster, client.scheduler.address == cluster.scheduler_address, "
                       "default_client() is client, total.client is client, "
                       "sum(map(len, client.has_what().values())) >= 9)") == (True, True, True, True, True)
    assert fresh.value("client.submit(lambda a: float(a.sum()), x.blocks[0]).result()") == \
        k.value("float(x.blocks[0].sum().compute())")
    fresh.ok("cluster.scale(3)\nclient.wait_for_workers(3)")
    assert fresh.value("(len(cluster.workers), len(client.scheduler_info()['workers']), "
                       "client.submit(pow, 2, 10).result())") == (3, 3, 1024)
    # a client that made its own cluster closes it, as before
    assert fresh.value("(own.submit(abs, -1).result(), own.close(), own.cluster.status.name, "
                       "cluster.status.name)") == (1, None, "closed", "running")


def _pids_alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        alive.append(pid)
    return alive


def test_a_cluster_of_worker_processes_starts_new_ones_that_end_with_the_kernel(kernels: KernelFactory) -> None:
    k = kernels.start()
    k.ok(CLUSTER.format(processes=True))
    k.ok("x = da.arange(1000, chunks=100).persist()\nwait(x)")
    spec, old = k.value(SPEC), k.value("sorted(client.run(os.getpid).values())")
    assert spec == (True, [(2, 400 * 2**20)] * 2, ["Nanny", "Nanny"])
    checkpoint = k.save()
    k.shutdown()

    fresh = kernels.start()
    assert fresh.ok(f"%gpuckpt restore {checkpoint}").startswith("Restored ")
    assert _report(fresh)["started_again"] == ["cluster", "client", "x"]
    assert fresh.value(SPEC) == spec
    assert fresh.value("int(x.sum().compute())") == 499500
    workers = fresh.value("sorted(client.run(os.getpid).values())")
    assert len(workers) == 2 and not set(workers) & set(old) and _pids_alive(workers) == workers

    fresh.client.stop_channels()
    fresh.manager.shutdown_kernel(now=False)  # as JupyterLab shuts a kernel down
    deadline = time.monotonic() + 30
    while _pids_alive(workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _pids_alive(workers) == []


@pytest.fixture
def scheduler() -> Iterator[Any]:
    """A scheduler of this test process, as a notebook finds one running elsewhere."""
    from distributed import LocalCluster

    # its HTTP server on a free port: "port 8787 is in use" would be a warning, an error here
    cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp://",
                           host="127.0.0.1", dashboard_address=":0")
    yield cluster
    cluster.close()


def test_a_client_of_a_scheduler_elsewhere_reconnects_or_is_reported_with_what_needs_it(
        kernels: KernelFactory, scheduler: Any) -> None:
    address = scheduler.scheduler_address
    k = kernels.start()
    k.ok(f"import dask.array as da\nfrom dask.distributed import Client, wait\nclient = Client({address!r})")  # cell 2
    k.ok("x = da.arange(60, chunks=20).persist()\nwait(x)\ny = x + 1\nplain = [1, 2]")  # cell 3
    checkpoint = k.save()
    k.shutdown()

    back = kernels.start()
    assert back.ok(f"%gpuckpt restore {checkpoint}").startswith("Restored ")
    assert _report(back)["started_again"] == ["client", "x"]
    assert back.value("(client.scheduler.address, int(y.sum().compute()), client.submit(abs, -3).result())") == (
        address, 1830, 3)
    back.shutdown()

    scheduler.close()
    gone = kernels.start()
    text = gone.ok(f"%gpuckpt restore {checkpoint}")
    assert "; 3 not restored.\n" in text.splitlines()[0] + "\n", text
    assert "Not restored, they could not be set up again (3):" in text
    why = f"dask client of {address} could not be set up again: ConnectionError: the scheduler at {address} " \
          "does not answer"
    assert f"  client (distributed.client.Client): {why}" in text
    report = _report(gone)
    lost = {v["name"]: v for v in report["not_set_up"]}
    assert list(lost) == ["client", "x", "y"]
    assert [v["cells"] for v in lost.values()] == [[2], [3], [3]]  # x uses the default client: cell 3 alone
    assert "their client is not connected" in lost["x"]["reason"]
    assert lost["y"]["reason"].startswith("holds an object of x: dask futures 'arange-")
    assert report["restored"] == ["da", "Client", "wait", "plain"] and report["started_again"] == []
    assert report["cells_to_rerun"] == [2, 3] and text.strip().splitlines()[-1] == "Cells to re-run: 2, 3"
    assert gone.value("[name in globals() for name in ('client', 'x', 'y', 'plain')]") == [False, False, False, True]


def test_a_restore_that_fails_starts_no_cluster_and_the_next_one_does(kernels: KernelFactory) -> None:
    k = kernels.start()
    k.ok(CLUSTER.format(processes=False))
    k.ok("x = da.random.RandomState(1).random_sample((200, 200), chunks=(100, 200)).persist()\nwait(x)")
    total = k.value("float(x.sum().compute())")
    checkpoint = k.save()
    manifest = load_manifest(kernels.store, checkpoint)
    entry = next(b for b in manifest["buffers"] if b["var"] == "x")
    blob, offset = buffer_blob(kernels.store, manifest, "x"), entry["extents"][0][1] + 100
    flip_byte(blob, offset)

    fresh = kernels.start()
    # what a cluster or client would have started (the restore's own readers, gpuckpt-io, stay for the next)
    state = ("import threading, distributed\n"
             "threads = sorted(t.name for t in threading.enumerate() if not t.name.startswith('gpuckpt-'))\n"
             "print(repr((threads, len(distributed.deploy.spec.SpecCluster._instances), "
             "len(distributed.Client._instances))))")
    before = fresh.ok(state).strip()
    failed = fresh.run(f"%gpuckpt restore {checkpoint}")
    assert failed.error is not None and "corrupt" in failed.stdout + failed.stderr + failed.error
    assert fresh.ok(state).strip() == before
    assert fresh.value("[name in globals() for name in ('cluster', 'client', 'x')]") == [False, False, False]

    flip_byte(blob, offset)
    assert fresh.ok(f"%gpuckpt restore {checkpoint}").startswith("Restored ")
    assert fresh.value("(float(x.sum().compute()), len(cluster.workers))") == (total, 2)
