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
"""Workloads whose save and restore are judged against the raw disk's speed."""
MANY_SMALL = ("c",)
"""Workloads of many small objects: their save is judged against pickle 5, which uses the
same C pickler and memo, rather than against every peer."""
DISK_MARGIN = 1.01
"""Bytes on disk may exceed the smallest peer's by this factor: a signed checkpoint that is
verified on load needs its manifest and hashes."""

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
    any_size: bool = False
    """Whether the target holds at any size, so ``--quick`` (1% of the issue's sizes) judges
    it; the others are set for the issue's sizes, where fixed costs are small against the
    bytes moved."""
    judged: bool = True
    """False where this run's size is not the one the target is set for (``--quick``)."""

    @property
    def status(self) -> str:
        if not self.judged:
            return "not judged at this size"
        return "not measured" if self.met is None else "met" if self.met else "MISSED"


SMALL_SCALE = 0.01
"""Size of the small states, as a fraction of the issue's: (a) 20 MB of arrays, (c) 1,000
objects and 1,000 dicts, the megabytes most notebook cells hold."""
SMALL_KEYS = ("a", "c")
SMALL_GAP = 0.020
"""A small state saves and restores within this many seconds of pickle 5's time."""
PARITY = 1.10
"""States of many small objects: save time and peak memory at most this many times pickle 5's."""
ALL_TARGETS_SCALE = 0.25
"""The smallest scale at which every target is judged (the default run's); below it only
those that hold at any size are (see :attr:`Target.any_size`)."""


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


def _fastest(figures: dict[str, Figures], what: str, key: str, mine: float | None) -> Target:
    """Ours against the fastest peer at ``what`` (save or restore)."""
    theirs = {p: _m(figures, p, what) for p in PEERS if p in figures}
    measured = {p: v for p, v in theirs.items() if v is not None}
    fastest = min(measured, key=measured.__getitem__) if measured else None
    margin = measured[fastest] / mine if fastest and mine else None
    failed = [p for p, v in theirs.items() if v is None]
    text = _fmt(margin, ".2f", "x the fastest peer's time") + (
        f" ({fastest}){_race(figures, what, fastest)}" if margin and fastest else "") + (
        f"; {', '.join(failed)} failed" if failed else "")
    return Target(f"{what} faster than every peer", key, text, None if margin is None else margin > 1)


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
        ours = figures.get("ours")
        out.append(Target("restored state equals the saved one", key,
                          f"ours failed: {ours.error}" if ours and ours.error else
                          f"{len(ours.restore)} restore(s) checked" if ours else "-",
                          None if ours is None or not (ours.error or ours.restore) else not ours.error,
                          any_size=True))
        if key in MANY_SMALL:
            pickled = _m(figures, "pickle5", "save")
            out.append(Target(f"save time at parity (+-{PARITY - 1:.0%}) with pickle 5", key,
                              _fmt(ours_save / pickled if ours_save and pickled else None, ".2f", "x pickle 5's"),
                              None if not (ours_save and pickled) else ours_save <= PARITY * pickled))
            mine_peak, their_peak = _m(figures, "ours", "peak"), _m(figures, "pickle5", "peak")
            out.append(Target(f"peak extra memory at parity (+-{PARITY - 1:.0%}) with pickle 5", key,
                              f"{mine_peak / 1e6:.1f} MB against {their_peak / 1e6:.1f} MB"
                              if mine_peak is not None and their_peak is not None else "-",
                              None if mine_peak is None or their_peak is None else mine_peak <= PARITY * their_peak))
        for what, mine in (("save", ours_save), ("restore", ours_restore)):
            # Many small objects save at parity with pickle 5 (above), not faster than it.
            if not (what == "save" and key in MANY_SMALL):
                out.append(_fastest(figures, what, key, mine))
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
        out.append(Target(f"bytes on disk within {DISK_MARGIN - 1:.0%} of the smallest peer", key,
                          (f"{state / fewest:.4f}x the smallest peer's, {(state - fewest) / 1e3:+,.0f} kB"
                           if state and fewest else "-")
                          + (f" ({', '.join(partial)} recomputed part of the state: not compared)" if partial else ""),
                          None if not (state and fewest) else state <= DISK_MARGIN * fewest, any_size=True))
        written = _m(figures, "ours incremental", "disk")
        out.append(Target("incremental after a 1% change writes <= 2%", key,
                          _fmt(written / state * 100 if written is not None and state else None, ".2f", "%"),
                          None if written is None or not state else written <= 0.02 * state))
        peak = _m(figures, "ours", "peak")
        if key not in MANY_SMALL:
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
                          f"{1000 * (with_hooks - without):+.2f} ms", with_hooks - without < 0.001, any_size=True))
    return out


def _ms(values: list[float]) -> str:
    """Median and range of ``values`` (seconds) in milliseconds."""
    if not values:
        return "-"
    low, high = min(values), max(values)
    return f"{1000 * statistics.median(values):.0f} ({1000 * low:.0f}-{1000 * high:.0f})"


def small_table(small: PeerBench) -> str:
    """Ours against pickle 5 on the small states: the fixed cost of a checkpoint and of a
    restore, which at these sizes outweighs moving the bytes."""
    lines: list[tuple[str, ...]] = [("state", "MB", "ours save", "1st save", "pickle 5 save", "save diff",
                                     "ours restore", "pickle 5 restore", "restore diff")]
    for key, figures in small.results.items():
        ours, theirs = figures.get("ours"), figures.get("pickle5")
        if ours is None or theirs is None or ours.error or theirs.error:
            lines.append((f"({key})", "failed", *("",) * 7))
            continue
        diffs = [_gap(figures, what) for what in ("save", "restore")]
        lines.append((f"({key}) {small.notes[key]['title']}", f"{small.notes[key]['state bytes'] / 1e6:.1f}",
                      _ms(ours.save), _ms(ours.save[:1]), _ms(theirs.save),
                      _fmt(diffs[0] and 1000 * diffs[0], "+.0f", " ms"),
                      _ms(ours.restore), _ms(theirs.restore), _fmt(diffs[1] and 1000 * diffs[1], "+.0f", " ms")))
    return align(lines)


def _gap(figures: dict[str, Figures], what: str) -> float | None:
    """Ours minus pickle 5, seconds: the difference of the medians."""
    mine, theirs = _m(figures, "ours", what), _m(figures, "pickle5", what)
    return None if mine is None or theirs is None else mine - theirs


def small_targets(small: PeerBench) -> list[Target]:
    out = []
    for key, figures in small.results.items():
        for what in ("save", "restore"):
            gap = _gap(figures, what)
            out.append(Target(f"small state: {what} within {1000 * SMALL_GAP:.0f} ms of pickle 5",
                              f"{key} at {small.scale:g}", _fmt(gap and 1000 * gap, "+.1f", " ms"),
                              None if gap is None else gap <= SMALL_GAP, any_size=True))
    return out


def report(bench: PeerBench, workloads: list[Workload], overhead: dict[str, list[float]], info: dict[str, Any],
           scale: float, elapsed: float, small: PeerBench | None = None) -> tuple[str, dict[str, Any]]:
    """The printed report and the JSON document. ``small``: the small states' measurements.

    Below the issue's sizes (``--quick``'s 1%), only the targets that hold at any size are
    judged: the small states', bytes on disk, correctness and the per-cell overhead; the
    others, set for sizes where moving the bytes outweighs a checkpoint's fixed cost, are
    listed as not judged."""
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
    if small is not None and small.results:
        lines += [f"Small states: {small.scale:g} of the issue's sizes, {small.runs} runs; ms, median (min-max); "
                  "'1st save' is the first save in its kernel; diff = ours - pickle 5 (medians); "
                  f"target: within {1000 * SMALL_GAP:.0f} ms of pickle 5",
                  small_table(small), ""]
    found = targets(bench.results, bench.notes, overhead) + (small_targets(small) if small is not None else [])
    for t in found:
        t.judged = scale >= ALL_TARGETS_SCALE or t.any_size
    table: list[tuple[str, ...]] = [("target", "workload", "measured", "status")]
    table += [(t.goal, t.workload, t.measured, t.status) for t in found]
    lines += ["Targets" + ("" if all(t.judged for t in found) else
                           f" (at {scale:g} of the issue's sizes, below {ALL_TARGETS_SCALE:g}, only those that hold "
                           "at any size are judged: the small states', bytes on disk, correctness, per-cell overhead)"),
              align(table), "", bench.cache.summary()]
    data = {
        "machine": info, "scale": scale, "runs": bench.runs, "elapsed_seconds": elapsed,
        "workloads": {w.key: {**bench.notes[w.key], "systems": {s: asdict(f) for s, f in bench.results[w.key].items()}}
                      for w in workloads},
        "small_states": None if small is None else {
            "scale": small.scale, "runs": small.runs, "gap_seconds": SMALL_GAP,
            "workloads": {key: {**small.notes[key], "systems": {s: asdict(f) for s, f in figures.items()}}
                          for key, figures in small.results.items()}},
        "cell_overhead_seconds": overhead, "targets": [{**asdict(t), "status": t.status} for t in found],
        "cache": {"methods": sorted(bench.cache.methods), "worst_resident": bench.cache.worst_resident},
    }
    return "\n".join(lines), data
