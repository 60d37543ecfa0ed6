"""The tables, targets and JSON of ``bench_peers.py``."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from harness import GB, align, machine_lines

if TYPE_CHECKING:
    from bench_peers import PeerBench
    from peer_workloads import Workload

PEERS = ("dill", "Kishu", "torch.save", "pickle5")
DISK_BOUND = ("a", "b", "d")

VERSIONS = """\
import platform
result = {"python": platform.python_version(), "executable": sys.executable,
          **{m: sys.modules[m].__version__ for m in ("numpy", "pandas", "torch", "dill")}}
"""


@dataclass
class Figures:
    """All runs of one system on one workload."""

    save: list[float] = field(default_factory=list)
    restore: list[float] = field(default_factory=list)
    disk: list[int] = field(default_factory=list)
    """Bytes on disk after the save (for an incremental save: bytes it wrote)."""
    peak: list[int] = field(default_factory=list)
    """Peak extra resident memory of the saving kernel, bytes."""
    error: str | None = None

    @staticmethod
    def median(values: list[Any]) -> float | None:
        return statistics.median(values) if values else None


@dataclass
class Target:
    goal: str
    workload: str
    measured: str
    met: bool | None  # None: could not be measured


def _m(figures: dict[str, Figures], system: str, what: str) -> float | None:
    f = figures.get(system)
    return None if f is None or f.error else Figures.median(getattr(f, what))


def _race(figures: dict[str, Figures], what: str, peer: str) -> str:
    """``peer`` against ours run by run: each run times every system within minutes of the
    others, so the runs ours won say more than two medians when the VM's speed drifts."""
    ours, theirs = getattr(figures["ours"], what), getattr(figures[peer], what)
    runs = min(len(ours), len(theirs))
    if runs < 2:
        return ""
    wins = sum(o < t for o, t in zip(ours, theirs, strict=False))
    return (f"; ours faster in {wins} of {runs} runs (ours {min(ours):.2f}-{max(ours):.2f} s, "
            f"{peer} {min(theirs):.2f}-{max(theirs):.2f} s)")


def disk_rates(results: dict[str, dict[str, Figures]]) -> dict[str, float | None]:
    """The disk's speed in bytes per second: the faster of raw write and write-behind, and
    raw read, each the median of every run of every workload. One yardstick for the whole
    run: the disk of a shared VM varies by 2x between minutes, and a workload's own three
    runs would make its ratios as noisy as that."""
    rates: dict[str, float | None] = {}
    for kind, names in (("write", ("raw write", "raw write-behind")), ("read", ("raw read",))):
        medians = []
        for name in names:
            samples = [nbytes / seconds for figures in results.values() if name in figures
                       for seconds, nbytes in zip(getattr(figures[name], "save" if kind == "write" else "restore"),
                                                  figures[name].disk, strict=True) if seconds]
            if samples:
                medians.append(statistics.median(samples))
        rates[kind] = max(medians) if medians else None
    return rates


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def workload_table(figures: dict[str, Figures], memory: int, raw: dict[str, float | None]) -> str:
    """One workload's table: every system's medians, rates against the disk, ratios to ours.

    ``memory`` is the state's size in memory, for the peak-memory column; ``raw`` the
    run's :func:`disk_rates`.
    """
    write, read = raw["write"], raw["read"]
    ours_save, ours_restore = _m(figures, "ours", "save"), _m(figures, "ours", "restore")
    state = _m(figures, "ours", "disk")
    lines: list[tuple[str, ...]] = [("system", "save s", "restore s", "GB on disk", "save GB/s", "restore GB/s",
                                     "peak extra MB", "save x ours", "restore x ours", "runs")]
    for system, f in figures.items():
        if f.error:
            lines.append((system, "failed", *("",) * 8))
            continue
        save, restore, disk, peak = (Figures.median(v) for v in (f.save, f.restore, f.disk, f.peak))
        save_rate = disk / save if save and disk and system != "ours incremental" else None
        restore_rate = disk / restore if restore and disk and system != "re-run" else None
        share_w = f" ({100 * save_rate / write:.0f}%)" if save_rate and write and system == "ours" else ""
        share_r = f" ({100 * restore_rate / read:.0f}%)" if restore_rate and read and system == "ours" else ""
        on_disk = _fmt(disk and disk / GB, ".3f")
        if system == "ours incremental" and disk is not None and state:
            on_disk += f" ({100 * disk / state:.2f}%)"
        peak_text = "-" if peak is None else f"{peak / 1e6:.0f} ({100 * peak / memory:.1f}%)"
        lines.append((
            system, _fmt(save, ".2f"), _fmt(restore, ".2f"), on_disk,
            _fmt(save_rate and save_rate / GB, ".2f") + share_w,
            _fmt(restore_rate and restore_rate / GB, ".2f") + share_r,
            peak_text,
            _fmt(save / ours_save if save and ours_save and system in PEERS else None, ".1f", "x"),
            _fmt(restore / ours_restore if restore and ours_restore and system in PEERS + ("re-run", "imports only")
                 else None,
                 ".1f", "x"),
            str(max(len(f.save), len(f.restore))),
        ))
    return align(lines)


def targets(results: dict[str, dict[str, Figures]], notes: dict[str, dict[str, Any]],
            overhead: dict[str, list[float]]) -> list[Target]:
    out: list[Target] = []
    disk = disk_rates(results)
    for key, figures in results.items():
        memory = notes[key]["state bytes"]
        ours_save, ours_restore = _m(figures, "ours", "save"), _m(figures, "ours", "restore")
        state = _m(figures, "ours", "disk")
        if key in DISK_BOUND:
            for kind, mine in (("write", ours_save), ("read", ours_restore)):
                raw = disk[kind]
                share = state / mine / raw if mine and state and raw else None
                out.append(Target(f"{'save' if kind == 'write' else 'restore'} >= 80% of raw {kind}", key,
                                  _fmt(share and 100 * share, ".0f", "%"), None if share is None else share >= 0.8))
        for what, mine in (("save", ours_save), ("restore", ours_restore)):
            theirs = {p: _m(figures, p, what) for p in PEERS if p in figures}
            measured = {p: v for p, v in theirs.items() if v is not None}
            fastest = min(measured, key=measured.__getitem__) if measured else None
            margin = measured[fastest] / mine if fastest and mine else None
            failed = [p for p, v in theirs.items() if v is None]
            text = _fmt(margin, ".2f", "x the fastest peer's time") + (
                f" ({fastest}){_race(figures, what, fastest)}" if margin and fastest else "") + (
                f"; {', '.join(failed)} failed" if failed else "")
            out.append(Target(f"{what} faster than every peer", key, text, None if margin is None else margin > 1))
            kishu = _m(figures, "Kishu", what)
            out.append(Target(f"{what} >= 5x faster than Kishu", key,
                              _fmt(kishu / mine if kishu and mine else None, ".1f", "x"),
                              None if not (kishu and mine) else kishu / mine >= 5))
        disks = {p: _m(figures, p, "disk") for p in PEERS if p in figures}
        # A peer that stored less than half our bytes, or whose restore took half as long as
        # re-running the notebook, stored less state and recomputed the rest (Kishu re-runs
        # the cells whose variables it could not pickle): comparing bytes with it means nothing.
        rerun = _m(figures, "re-run", "restore")
        partial = [p for p, v in disks.items()
                   if v and state and (v < state / 2 or (rerun and (_m(figures, p, "restore") or 0) > rerun / 2))]
        fewest = min((v for p, v in disks.items() if v and p not in partial), default=None)
        out.append(Target("no more bytes on disk than any peer", key,
                          (f"{state / fewest:.4f}x the smallest peer's, {(state - fewest) / 1e3:+,.0f} kB"
                           if state and fewest else "-")
                          + (f" ({', '.join(partial)} recomputed part of the state: not compared)" if partial else ""),
                          None if not (state and fewest) else state <= fewest))
        written = _m(figures, "ours incremental", "disk")
        out.append(Target("incremental after a 1% change writes <= 2%", key,
                          _fmt(written / state * 100 if written is not None and state else None, ".2f", "%"),
                          None if written is None or not state else written <= 0.02 * state))
        peak = _m(figures, "ours", "peak")
        out.append(Target("peak extra memory <= 10% of the state", key,
                          _fmt(peak / memory * 100 if peak is not None else None, ".1f", "%")
                          + f" of {memory / 1e6:.0f} MB",
                          None if peak is None else peak <= 0.1 * memory))
        rerun = _m(figures, "re-run", "restore")
        if rerun is not None:
            out.append(Target("restore >= 30x faster than re-running", key,
                              _fmt(rerun / ours_restore if ours_restore else None, ".0f", "x"),
                              None if not ours_restore else rerun / ours_restore >= 30))
    if overhead:
        with_hooks, without = (statistics.median(overhead[k]) for k in ("with hooks", "without hooks"))
        out.append(Target("per-cell overhead of the hooks < 1 ms median", "-",
                          f"{1000 * (with_hooks - without):+.2f} ms", with_hooks - without < 0.001))
    return out


def report(bench: PeerBench, workloads: list[Workload], overhead: dict[str, list[float]], info: dict[str, Any],
           scale: float, elapsed: float) -> tuple[str, dict[str, Any]]:
    """The printed report and the JSON document."""
    lines = machine_lines(info) + [
        f"Python {info['python']}, numpy {info['numpy']}, pandas {info['pandas']}, torch {info['torch']}, "
        f"dill {info['dill']}, Kishu {info['kishu']}, blake3 {info['blake3']}, "
        f"jupyter-gpuckpt {info['jupyter-gpuckpt']}",
        f"Scale {scale:g} of the issue's sizes" + (" (scaled down; --full for the issue's sizes)" if scale < 1 else "")
        + f"; {elapsed / 60:.1f} minutes in all. GB = 10^9 bytes; times are medians.", ""]
    disk = disk_rates(bench.results)
    if disk["write"] and disk["read"]:
        lines += [f"The disk, median of every raw run of this invocation: write {disk['write'] / GB:.2f} GB/s "
                  f"(the faster of a plain write and a write-behind, with fsync), read {disk['read'] / GB:.2f} GB/s "
                  "from a dropped page cache. Every '% of raw' below is against these.", ""]
    for w in workloads:
        notes = bench.notes[w.key]
        lines += [f"({w.key}) {notes['title']}; the variables take {notes['state bytes'] / GB:.3f} GB in memory",
                  workload_table(bench.results[w.key], notes["state bytes"], disk)]
        extra = [f"built in {notes['build_seconds']:.0f} s"]
        if "changed bytes" in notes:
            extra.append(f"incremental: {notes['changed bytes'] / 1e6:.1f} MB changed in place before it")
        if "ours skipped" in notes:
            extra.append(f"ours skipped {notes['ours skipped']}")
        extra += [f"{system} failed: {f.error}" for system, f in bench.results[w.key].items() if f.error]
        kishu, ours = (_m(bench.results[w.key], s, "disk") for s in ("Kishu", "ours"))
        if kishu is not None and ours and kishu < ours / 2:
            extra.append(f"Kishu stored {100 * kishu / ours:.0f}% of our bytes: it re-runs the cells whose "
                         "variables it cannot pickle when it checks out")
        if "re-run gives the same state" in notes:
            extra.append(f"re-run reproduces the state: {'yes' if notes['re-run gives the same state'] else 'no'}")
        lines += [f"  {note}" for note in extra] + [""]
    if overhead:
        medians = {name: statistics.median(times) for name, times in overhead.items()}
        lines.append("Per-cell round trip of a trivial cell (median): " + ", ".join(
            f"{name} {1000 * m:.2f} ms ({len(overhead[name])} cells)" for name, m in medians.items()))
        lines.append("")
    found = targets(bench.results, bench.notes, overhead)
    table: list[tuple[str, ...]] = [("target", "workload", "measured", "status")]
    table += [(t.goal, t.workload, t.measured, "not measured" if t.met is None else "met" if t.met else "MISSED")
              for t in found]
    lines += ["Targets", align(table), "", bench.cache.summary()]
    data = {
        "machine": info, "scale": scale, "runs": bench.runs, "elapsed_seconds": elapsed,
        "workloads": {w.key: {**bench.notes[w.key], "systems": {s: asdict(f) for s, f in bench.results[w.key].items()}}
                      for w in workloads},
        "cell_overhead_seconds": overhead, "targets": [asdict(t) for t in found],
        "cache": {"methods": sorted(bench.cache.methods), "worst_resident": bench.cache.worst_resident},
    }
    return "\n".join(lines), data
