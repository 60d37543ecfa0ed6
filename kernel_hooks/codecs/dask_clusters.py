"""dask.distributed: a ``LocalCluster`` comes back as a cluster of the same spec started
again, a ``Client`` connected to it (or to the same scheduler address, if that answers), and
a ``Future`` (alone, or in the graph of a collection after ``.persist()``) as a future of the
same key whose result is in the restored cluster's memory again.

A cluster keeps its spec in its scheduler's and workers' specs (``scheduler_spec``,
``worker_spec``: one entry per worker it was scaled to, with its threads, memory limit and
class, a ``Nanny`` where workers are processes, and ``new_spec`` for those it scales to),
which ``SpecCluster.__init__`` takes as they are; ``LocalCluster.__init__`` only builds
them from its arguments, so the restore calls the former with them. A cluster that adapts
adapts again, with the same options.

A future's result lives only in the saving kernel's cluster, and what made it is gone by
then: ``persist`` leaves the collection a graph of futures, and the scheduler forgets the
tasks that fed a result once it is computed, so there is no graph left to run again. So
the results are gathered at save time, a collection's chunks (keys ``(name, i, ...)``) in
one call, and the restore puts them back into the restored cluster under the same keys
(``Client.scatter``): the collection is persisted there as it was, and a bare future is
finished with its result. Gathering costs what moving the data out of the workers does: on
2 cores, 100 MB in 100 chunks took 3 to 5 ms from threaded workers (the same objects; one
call per chunk took 30 to 60 ms) and 0.13 to 0.15 s from 2 worker processes; scattering it
back 3 to 4 ms and 0.16 to 0.21 s. A whole ``%gpuckpt save`` of that persisted array took 0.12
to 0.37 s (the same data as one numpy array: 0.07 to 0.24 s), and its restore in a fresh kernel,
the cluster started included, 0.3 to 0.45 s with threaded workers and 1.1 to 2.6 s with worker
processes (3 runs each). A future still pending, erred, cancelled or lost has no result to
take: its variable is left out with the reason.

Nothing starts while unpickling: the cluster, the client's connection and the upload of the
results wait until the restore commits (see :func:`.live_objects.on_commit`), in that order
(the unpickler finishes a cluster before the client that holds it, and a client before its
futures). A restore that fails starts no scheduler, worker or thread; one whose cluster
cannot start, or whose scheduler does not answer, reports the variables that need it as not
restored, with the reason. A restored cluster is registered as one made in a cell: the
kernel's exit closes it, and its worker processes end with the kernel's.
"""

from __future__ import annotations

import socket
from functools import partial
from typing import TYPE_CHECKING, Any

from .live_objects import Reducer, latest_action, on_commit

if TYPE_CHECKING:
    from distributed import Client, Future, LocalCluster
    from distributed.deploy.spec import SpecCluster

_ANSWER_SECONDS = 5.0
"""How long a restored client waits for its scheduler's address to accept a connection
before it is reported not restored (a client's own timeout is 30 s by default)."""

_MISSING = object()


def _start_cluster(cluster: LocalCluster, processes: bool, settings: dict[str, Any],
                   adaptive: tuple[type, dict[str, Any]] | None) -> None:
    from distributed.deploy.cluster import Cluster
    from distributed.deploy.spec import SpecCluster

    cluster.status = None  # type: ignore[assignment]  # what LocalCluster.__init__ sets before SpecCluster's
    cluster.processes = processes
    SpecCluster.__init__(cluster, **settings)  # type: ignore[no-untyped-call]
    if adaptive is not None:
        kind, options = adaptive
        Cluster.adapt(cluster, kind, **options)


def _cluster(kind: type[LocalCluster], processes: bool, settings: dict[str, Any],
             adaptive: tuple[type, dict[str, Any]] | None) -> LocalCluster:
    cluster = kind.__new__(kind)  # no status yet: dropped unstarted, it is collected quietly
    on_commit(f"dask {kind.__name__} {settings['name']!r}",
              partial(_start_cluster, cluster, processes, settings, adaptive))
    return cluster


def _reduce_cluster(cluster: LocalCluster) -> Any:
    from distributed import LocalCluster
    from distributed.core import Status

    kind = type(cluster)
    if kind.__init__ is not LocalCluster.__init__:
        raise TypeError(f"a dask {kind.__qualname__} cannot be saved: its constructor sets up more than the spec "
                        "of its scheduler and workers; re-run the cell that makes it")
    if cluster.asynchronous:
        raise TypeError("an asynchronous dask cluster cannot be saved: it runs on the kernel's event loop")
    if cluster.status != Status.running:
        raise TypeError(f"a dask cluster that is {cluster.status.name} cannot be saved: make a new one")
    settings = {
        "name": cluster._name, "scheduler": cluster.scheduler_spec, "workers": cluster.worker_spec,
        "worker": cluster.new_spec, "security": cluster.security, "shutdown_on_close": cluster.shutdown_on_close,
        "silence_logs": (cluster.new_spec or {}).get("options", {}).get("silence_logs", False),
        "scheduler_sync_interval": cluster._sync_interval,
    }
    adaptive = cluster._adaptive
    adapting = (type(adaptive), dict(cluster._adaptive_options)) \
        if adaptive is not None and adaptive.state in ("starting", "running") else None
    return _cluster, (kind, cluster.processes, settings, adapting)


def _answers(address: str) -> None:
    """Raise unless the scheduler's ``address`` accepts a connection within :data:`_ANSWER_SECONDS`."""
    from distributed.comm.addressing import get_address_host_port

    try:
        host, port = get_address_host_port(address)
        socket.create_connection((host, port), timeout=_ANSWER_SECONDS).close()
    except (OSError, ValueError) as e:
        raise ConnectionError(f"the scheduler at {address} does not answer ({e})") from e


def _connect(client: Client, target: LocalCluster | str, settings: dict[str, Any], owns_cluster: bool) -> None:
    if isinstance(target, str):
        _answers(target)
    type(client).__init__(client, target, **settings)  # type: ignore[no-untyped-call]
    if owns_cluster:
        client._start_arg = None  # it made its cluster (Client(n_workers=...)): closing it closes that too


def _client(kind: type[Client], target: LocalCluster | str, settings: dict[str, Any], owns_cluster: bool) -> Client:
    # Unstarted, its __del__ finds the class's __loop (None) and does nothing.
    client = kind.__new__(kind)
    where = target if isinstance(target, str) else f"cluster {target.__class__.__name__}"
    on_commit(f"dask client of {where}", partial(_connect, client, target, settings, owns_cluster))
    return client


def _local_cluster(address: str) -> SpecCluster | None:
    """The cluster of this kernel whose scheduler is at ``address``, if one is."""
    from distributed.deploy.spec import SpecCluster

    for cluster in list(SpecCluster._instances):
        if cluster.scheduler is not None and cluster.scheduler_address == address:
            return cluster
    return None


def _reduce_client(client: Client) -> Any:
    if client.asynchronous:
        raise TypeError("an asynchronous dask client cannot be saved: it runs on the kernel's event loop")
    if client.status != "running":
        raise TypeError(f"a dask client that is {client.status} cannot be saved: make a new one")
    settings = {"timeout": client._timeout, "set_as_default": client._set_as_default,
                "direct_to_workers": client.direct_to_workers, "serializers": client._serializers,
                "deserializers": client._deserializers}
    address: str = client.scheduler.address  # type: ignore[union-attr,assignment]  # running: it has one
    target = client.cluster or _local_cluster(address)  # made from a cluster of this kernel: that one
    if target is None:
        settings["security"] = client.security  # (a client of a cluster takes the cluster's)
    owns_cluster = client.cluster is not None and client._start_arg is None
    return _client, (type(client), target or address, settings, owns_cluster)


class _Upload:
    """The results of futures gathered at save time, put back into the restored cluster
    under their keys in one call, once the client is connected: a persisted collection's
    futures are many."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.futures: list[Future[Any]] = []
        self.results: dict[Any, Any] = {}

    def add(self, future: Future[Any], result: Any) -> None:
        self.futures.append(future)
        self.results[future.key] = result

    @property
    def objects(self) -> list[Future[Any]]:
        """What the upload sets up: a variable that holds one of them needs it (see :func:`.live_objects.on_commit`)."""
        return self.futures

    def __call__(self) -> None:
        if getattr(self.client, "status", None) != "running":  # its connection failed (and was reported)
            raise ConnectionError("their client is not connected")
        scattered = self.client.scatter(self.results)  # type: ignore[no-untyped-call]
        for future in self.futures:
            future.bind_client(self.client)  # type: ignore[no-untyped-call]
        del scattered  # the restored futures hold the keys now


def _future(client: Client, key: Any, result: Any) -> Future[Any]:
    from distributed import Future

    future: Future[Any] = Future(key)  # bound to no client until its result is back in the cluster
    latest = latest_action()
    if isinstance(latest, _Upload) and latest.client is client:
        latest.add(future, result)
    else:
        upload = _Upload(client)
        upload.add(future, result)
        on_commit(f"dask futures {_collection(key)!r}", upload)
    return future


def _collection(key: Any) -> Any:
    """The name a collection's chunk keys share (``(name, i, ...)``), or the key itself."""
    return key[0] if isinstance(key, tuple) and key and isinstance(key[0], str) else key


class _Gathered:
    """The results of finished futures, gathered for one pickling pass: a collection's at
    once (every finished future of the client that shares its name), each chunk once."""

    def __init__(self) -> None:
        self._results: dict[tuple[str, Any], Any] = {}

    def result(self, future: Future[Any]) -> Any:
        from distributed import Future

        client = future.client
        found = self._results.get((client.id, future.key), _MISSING)
        if found is _MISSING:
            name = _collection(future.key)
            keys = [key for key, state in tuple(client.futures.items())
                    if key == future.key or (_collection(key) == name and state.status == "finished")]
            for key, result in zip(keys, client.gather([Future(key, client) for key in keys]), strict=True):
                self._results[(client.id, key)] = result
            found = self._results[(client.id, future.key)]
        return found

    def reduce(self, future: Future[Any]) -> Any:
        client = future.client
        if client is None:
            raise TypeError("a dask Future bound to no client cannot be saved")
        if future.status != "finished":
            raise TypeError(f"a dask Future that is {future.status} cannot be saved: only a finished one's result "
                            "is in the cluster to take; wait for it (distributed.wait) before saving")
        return _future, (client, future.key, self.result(future))


def families() -> dict[type, Reducer]:
    """Reducers by base class (see :mod:`.live_objects`), for the parts already imported;
    the results gathered are kept for one pickling pass (the table is built for each)."""
    from distributed import Client, Future, LocalCluster

    return {LocalCluster: _reduce_cluster, Client: _reduce_client, Future: _Gathered().reduce}
