"""Summaries of the checkpoints in a store, for ``%gpuckpt list`` and the server."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .store import CheckpointStore


def human_bytes(n: float) -> str:
    """``1536`` -> ``"1.5 KiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


@dataclass
class CheckpointInfo:
    """One line of a listing; ``problem`` is set (and the rest empty) if it cannot be trusted."""

    id: str
    created: str | None = None
    nbytes: int = 0
    variables: int = 0
    skipped: int = 0
    parent: str | None = None
    kernel_id: str | None = None
    notebook: str | None = None
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def list_checkpoints(store: CheckpointStore | None = None) -> list[CheckpointInfo]:
    """Every checkpoint of the store's owner, oldest first; only the manifests are read."""
    store = store or CheckpointStore()
    infos = []
    for checkpoint_id, manifest, problem in store.manifests():
        if manifest is None:
            infos.append(CheckpointInfo(checkpoint_id, problem=problem))
            continue
        statuses = [v["status"] for v in manifest["variables"]]
        infos.append(CheckpointInfo(
            id=checkpoint_id, created=manifest["created"], nbytes=manifest["stats"]["bytes_total"],
            variables=statuses.count("saved"), skipped=statuses.count("skipped"),
            parent=manifest["parent"], kernel_id=manifest["kernel_id"], notebook=manifest["notebook"],
        ))
    return infos


def format_table(infos: list[CheckpointInfo]) -> str:
    if not infos:
        return "No checkpoints."
    rows = [("ID", "CREATED (UTC)", "SIZE", "VARIABLES", "PARENT")]
    for info in infos:
        if info.problem:
            rows.append((info.id, "-", "-", "-", f"unusable: {info.problem}"))
            continue
        variables = f"{info.variables}" + (f" (+{info.skipped} skipped)" if info.skipped else "")
        created = (info.created or "-").replace("T", " ").removesuffix("+00:00")
        rows.append((info.id, created, human_bytes(info.nbytes), variables, info.parent or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths, strict=True)) + "  " + row[4] for row in rows
    )
