"""Reading and writing traces: the NotebookOS workload-template JSON and a plain CSV.

NotebookOS workload templates (``.json``), read with NotebookOS's own units: ``{"sessions":
[...]}`` (or the list alone); each session has an ``id``, ``start_tick``, ``stop_tick``, optional
``user``, ``group`` and ``resource_request``, and ``trainings``, each with ``start_tick`` and
``duration_in_ticks``. A training's resources are in either of NotebookOS's two shapes: its
``TrainingEvent`` (``num_gpus`` or the length of ``gpu_utilizations``; ``vram_usage_gb`` or
``vram`` in **GB**; ``mem_usage_mb`` in **MB**) or its resource spec (``Float64Spec``: ``gpus``;
``vram`` in **GB**; ``memory`` in **MB**); what a training lacks comes from its session's
``resource_request`` (a spec). A tick lasts ``tick_seconds`` (``--tick-seconds``; NotebookOS's
templates use 60).

CSV (``.csv``), one row per cell, times in seconds from the trace's start, sizes in GB:

    session_id,user,group,session_start,session_stop,cell_start,cell_duration,gpus,vram_gb,memory_gb,user_returned

``user_returned`` (optional, may be empty) is when the user came back to the notebook before
this cell, where the trace knows it: the only times a replay resumes a kernel ahead of a cell.
A session without cells is one row with the cell columns empty.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .trace import GB, Cell, Session, Trace

CSV_COLUMNS = ("session_id", "user", "group", "session_start", "session_stop", "cell_start", "cell_duration",
               "gpus", "vram_gb", "memory_gb", "user_returned")


class TraceFormatError(ValueError):
    """A trace file that cannot be read, with where and why."""


def read_trace(path: str | Path, tick_seconds: float = 60.0) -> Trace:
    """The trace in ``path``: NotebookOS JSON for ``.json``, else CSV."""
    path = Path(path)
    if path.suffix.lower() == ".json":
        return read_notebookos(path, tick_seconds)
    return read_csv(path)


def write_trace(trace: Trace, path: str | Path, tick_seconds: float = 60.0) -> None:
    path = Path(path)
    if path.suffix.lower() == ".json":
        write_notebookos(trace, path, tick_seconds)
    else:
        write_csv(trace, path)


MB = 1 << 20
"""NotebookOS's megabyte (its specs' ``MemoryMb``), taken as 2**20 bytes, as its GB is taken as
:data:`~.trace.GB` (2**30)."""


def _gb(value: Any) -> int:
    return int(float(value or 0) * GB)


def _first(*choices: tuple[Mapping[str, Any], str]) -> Any:
    """The first of ``(mapping, key)`` whose key is there (a 0 counts)."""
    return next((m[k] for m, k in choices if m.get(k) is not None), None)


def _training(t: Mapping[str, Any], request: Mapping[str, Any], tick_seconds: float) -> Cell:
    """A NotebookOS training as a cell, in bytes: memory given in MB, VRAM in GB."""
    gpus = _first((t, "num_gpus"), (t, "gpus"))
    if gpus is None and isinstance(t.get("gpu_utilizations"), list):
        gpus = len(t["gpu_utilizations"])
    gpus = _first((request, "gpus")) if gpus is None else gpus
    vram_gb = _first((t, "vram_usage_gb"), (t, "vram"), (request, "vram"))
    memory_mb = _first((t, "mem_usage_mb"), (t, "memory"), (request, "memory"))
    return Cell(float(t["start_tick"]) * tick_seconds, float(t["duration_in_ticks"]) * tick_seconds,
                int(float(gpus if gpus is not None else 1)), _gb(vram_gb), int(float(memory_mb or 0) * MB))


def read_notebookos(path: Path, tick_seconds: float) -> Trace:
    data = json.loads(path.read_text())
    items = data.get("sessions") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise TraceFormatError(f"{path}: no list of sessions")
    sessions = []
    for n, item in enumerate(items):
        try:
            request = item.get("resource_request") or {}
            cells = [_training(t, request, tick_seconds) for t in item.get("trainings") or []]
            sessions.append(Session(str(item.get("id", item.get("session_id", n))),
                                    float(item["start_tick"]) * tick_seconds, float(item["stop_tick"]) * tick_seconds,
                                    sorted(cells, key=lambda c: c.start), str(item.get("user", "")),
                                    str(item.get("group", ""))))
        except (KeyError, TypeError, ValueError) as e:
            raise TraceFormatError(f"{path}: session {n}: {e!r}") from e
    return Trace(sessions, path.stem)


def write_notebookos(trace: Trace, path: Path, tick_seconds: float) -> None:
    def trainings(s: Session) -> list[dict[str, Any]]:
        return [{"start_tick": c.start / tick_seconds, "duration_in_ticks": c.duration / tick_seconds,
                 "num_gpus": c.gpus, "vram_usage_gb": c.vram_bytes / GB, "mem_usage_mb": c.memory_bytes / MB}
                for c in s.cells]

    sessions = [{"id": s.session_id, "user": s.user, "group": s.group, "start_tick": s.start / tick_seconds,
                 "stop_tick": s.stop / tick_seconds, "trainings": trainings(s)} for s in trace.sessions]
    path.write_text(json.dumps({"name": trace.name, "tick_seconds": tick_seconds, "sessions": sessions}))


def read_csv(path: Path) -> Trace:
    sessions: dict[str, Session] = {}
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = set(CSV_COLUMNS[:10]) - set(reader.fieldnames or ())
        if missing:
            raise TraceFormatError(f"{path}: missing columns {', '.join(sorted(missing))}")
        for row in reader:
            try:
                sid = row["session_id"]
                s = sessions.get(sid)
                if s is None:
                    s = sessions[sid] = Session(sid, float(row["session_start"]), float(row["session_stop"]),
                                                user=row["user"], group=row["group"])
                if row["cell_start"]:
                    s.cells.append(Cell(float(row["cell_start"]), float(row["cell_duration"]), int(row["gpus"]),
                                        _gb(row["vram_gb"]), _gb(row["memory_gb"])))
                if row.get("user_returned"):
                    s.returns.append(float(row["user_returned"]))
            except (KeyError, TypeError, ValueError) as e:
                raise TraceFormatError(f"{path}: line {reader.line_num}: {e!r}") from e
    for s in sessions.values():
        s.cells.sort(key=lambda c: c.start)
        s.returns.sort()
    return Trace(list(sessions.values()), path.stem)


def write_csv(trace: Trace, path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        for s in trace.sessions:
            head = [s.session_id, s.user, s.group, f"{s.start:.3f}", f"{s.stop:.3f}"]
            returns = iter(s.returns)
            returned = next(returns, None)
            if not s.cells:
                writer.writerow([*head, "", "", "", "", "", ""])
            for c in s.cells:
                mark = ""
                if returned is not None and returned <= c.start:
                    mark, returned = f"{returned:.3f}", next(returns, None)
                writer.writerow([*head, f"{c.start:.3f}", f"{c.duration:.3f}", c.gpus, f"{c.vram_bytes / GB:.9g}",
                                 f"{c.memory_bytes / GB:.9g}", mark])
