"""What writes a training run's record comes back writing it: torch's tensorboard
``SummaryWriter`` appends to its log dir, a wandb run (offline) and an mlflow run (a sqlite
store) continue as the same run. Each test writes before the save, kills the saving kernel as
a suspend ends it (the wandb run's is shut down: wandb writes the last of an offline run's
records only when it finishes), writes again in the restored kernel, and reads the record back
with the library's own reader: both halves must be there, as one run. A record that is gone
by the restore (its folder deleted), or that a suspend cut short, is reported, never appended
to as if it were whole.

Nothing here reaches a network: wandb runs offline and mlflow on a local file.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kernel_processes import Kernel, KernelFactory

QUIET = {
    "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true", "WANDB_DISABLE_CODE": "true",
    "WANDB_ERROR_REPORTING": "false", "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true",
}


def _start(kernels: KernelFactory) -> Kernel:
    """A kernel whose wandb keeps its settings and caches in the test's folder."""
    home = kernels.root / "wandb-home"
    return kernels.start(**QUIET, WANDB_CONFIG_DIR=str(home / "config"), WANDB_CACHE_DIR=str(home / "cache"),
                         WANDB_DATA_DIR=str(home / "data"))


def _suspend(saving: Kernel, shut_down: bool = False) -> str:
    """Save, then end the kernel as a suspend does: at once, nothing flushed on the way out; or
    as a shutdown does (``shut_down``), through the exit of its process."""
    out = saving.ok("%gpuckpt save")
    assert "Not saved" not in out, out
    if shut_down:
        saving.client.stop_channels()
        saving.manager.shutdown_kernel(now=False)
    else:
        saving.shutdown()
    return out.strip().splitlines()[-1]


def _scalars(log_dir: Path, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir))
    events.Reload()
    return [(e.step, round(e.value, 4)) for e in events.Scalars(tag)]


def test_a_tensorboard_writer_appends_to_its_log_dir_after_restore(kernels: KernelFactory) -> None:
    log_dir = kernels.root / "runs" / "trial"
    saving = _start(kernels)
    # flush_secs: nothing reaches the file on a timer before the kernel is killed
    saving.ok(f"from torch.utils.tensorboard import SummaryWriter\n"
              f"writer = SummaryWriter({str(log_dir)!r}, flush_secs=3600)\n"
              f"closed = SummaryWriter({str(log_dir.parent / 'closed')!r}); closed.close()\n"
              "def log(step):\n"
              "    writer.add_scalar('loss', 1 / (step + 1), step)\n"
              "    writer.add_scalars('acc', {'train': step / 10, 'val': step / 20}, step)\n"
              "for step in range(3): log(step)")
    checkpoint = _suspend(saving)

    resumed = _start(kernels)
    report = resumed.ok(f"%gpuckpt restore {checkpoint}")
    assert "Not restored" not in report and "set up" not in report, report
    assert resumed.value("(type(writer).__name__, writer.log_dir, writer.purge_step, closed.file_writer)") == (
        "SummaryWriter", str(log_dir), None, None)
    resumed.ok("for step in range(3, 6): log(step)\nwriter.flush()")

    assert _scalars(log_dir, "loss") == [(s, round(1 / (s + 1), 4)) for s in range(6)]
    assert _scalars(log_dir / "acc_val", "acc") == [(s, s / 20) for s in range(6)]
    assert len(list(log_dir.glob("events.out.tfevents.*"))) == 2  # the restored writer's own file, as tensorboard appends


WANDB_RUN = """
import wandb
earlier = wandb.init(project="gpuckpt", dir={dir!r}, name="earlier")
earlier.finish()
run = wandb.init(project="gpuckpt", dir={dir!r}, name="trial", tags=["resumed"], config={{"lr": 0.01}})
for step in range(3):
    run.log({{"loss": 1 / (step + 1)}})
run.summary["best"] = 0.25
"""


def _wandb_records(run_folder: Path) -> list[dict[str, Any]]:
    """The records of an offline run, read with wandb's own reader of ``.wandb`` files."""
    out = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(run_folder)],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_a_wandb_offline_run_continues_as_the_same_run(kernels: KernelFactory) -> None:
    root = kernels.root / "tracking"
    root.mkdir()
    saving = _start(kernels)
    saving.ok(WANDB_RUN.format(dir=str(root)))
    run_id = saving.value("run.id")
    checkpoint = _suspend(saving, shut_down=True)  # its exit finishes the run: wandb writes the rest of its records

    resumed = _start(kernels)
    report = resumed.ok(f"%gpuckpt restore {checkpoint}")
    assert "Not restored" not in report and "set up" not in report, report
    assert resumed.value("(run.id, run.name, run.tags, run.step, dict(run.config), run.summary['best'], "
                         "wandb.run is run, run.offline)") == (run_id, "trial", ("resumed",), 3, {"lr": 0.01}, 0.25,
                                                               True, True)
    resumed.ok("for step in range(3, 6):\n    wandb.log({'loss': 1 / (step + 1)})\nrun.finish()")
    finished = resumed.run("earlier.log({'loss': 1.0})")  # a finished run comes back finished
    assert resumed.value("earlier.name") == "earlier" and "is finished" in str(finished.error), finished

    first, second = sorted((root / "wandb").glob(f"offline-run-*-{run_id}"))
    halves = [_wandb_records(first), _wandb_records(second)]
    runs = [next(r["run"] for r in records if r["type"] == "run") for records in halves]
    assert [r["run_id"] for r in runs] == [run_id, run_id]
    assert runs[1].get("resume") is True and runs[1]["config"]["update"]["lr"] == 0.01
    history = [[(r["history"]["step"].get("num", 0), r["history"]["item"]["loss"]) for r in records
                if r["type"] == "history"] for records in halves]
    assert history == [[(s, 1 / (s + 1)) for s in range(3)], [(s, 1 / (s + 1)) for s in range(3, 6)]]
    assert any(r["type"] == "exit" for r in halves[1])


def test_a_wandb_offline_run_cut_short_by_a_suspend_is_reported_not_continued(kernels: KernelFactory) -> None:
    root = kernels.root / "tracking"
    root.mkdir()
    saving = _start(kernels)
    saving.ok(WANDB_RUN.format(dir=str(root)))  # cell 2
    run_id = saving.value("run.id")
    checkpoint = _suspend(saving)  # killed: wandb-core had written none of the run's records (less than 32 KiB)

    resumed = _start(kernels)
    report = resumed.ok(f"%gpuckpt restore {checkpoint}")
    assert f"wandb run {run_id}" in report and "only its steps up to -1 of 2 reached the disk" in report, report
    assert resumed.run("run.log({'loss': 0.5})").error is not None
    assert len(list((root / "wandb").glob(f"offline-run-*-{run_id}"))) == 1  # no second half started after a gap


MLFLOW_RUNS = """
import mlflow
mlflow.set_tracking_uri("sqlite:///" + {db!r})
parent = mlflow.start_run(run_name="search")
trial = mlflow.start_run(run_name="trial", nested=True)
for step in range(3):
    mlflow.log_metric("loss", 1 / (step + 1), step=step)
"""


@pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated")  # mlflow's sqlite store's use
def test_an_active_mlflow_run_stays_active_and_logs_to_the_same_run(kernels: KernelFactory) -> None:
    db = kernels.root / "mlflow.db"
    saving = _start(kernels)
    saving.ok(MLFLOW_RUNS.format(db=str(db)))
    ids = saving.value("(parent.info.run_id, trial.info.run_id)")
    checkpoint = _suspend(saving)

    resumed = _start(kernels)
    report = resumed.ok(f"%gpuckpt restore {checkpoint}")
    assert "Not restored" not in report and "set up" not in report, report
    assert resumed.value("(mlflow.active_run().info.run_id, mlflow.get_tracking_uri())") == (ids[1], f"sqlite:///{db}")
    resumed.ok("for step in range(3, 6):\n    mlflow.log_metric('loss', 1 / (step + 1), step=step)")
    resumed.ok("with trial: pass")  # leaving it ends it, as before the suspend; its parent is active again
    assert resumed.value("mlflow.active_run().info.run_id") == ids[0]
    resumed.ok("mlflow.end_run()")

    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    history = sorted((m.step, m.value) for m in client.get_metric_history(ids[1], "loss"))
    assert history == [(s, 1 / (s + 1)) for s in range(6)]
    assert [client.get_run(i).info.status for i in ids] == ["FINISHED", "FINISHED"]
    assert len(client.search_runs([client.get_run(ids[0]).info.experiment_id])) == 2  # no run started anew


def test_records_gone_by_the_restore_are_reported_not_restored(kernels: KernelFactory) -> None:
    log_dir, root, db = kernels.root / "runs" / "trial", kernels.root / "tracking", kernels.root / "mlflow.db"
    root.mkdir()
    saving = _start(kernels)
    saving.ok(f"from torch.utils.tensorboard import SummaryWriter\nwriter = SummaryWriter({str(log_dir)!r})\n"
              "writer.add_scalar('loss', 1.0, 0)")  # cell 2
    saving.ok(WANDB_RUN.format(dir=str(root)))  # cell 3
    saving.ok(MLFLOW_RUNS.format(db=str(db)))  # cell 4
    checkpoint = _suspend(saving)
    shutil.rmtree(log_dir)
    shutil.rmtree(root / "wandb")
    db.unlink()

    resumed = _start(kernels)
    report = resumed.ok(f"%gpuckpt restore {checkpoint}")
    assert f"its log dir is gone, with the events written before the save: {log_dir}" in report, report
    assert "its offline run folder is gone, with the steps logged before the save" in report, report
    assert f"its tracking store is gone, with the run: {db}" in report, report
    for use in ("writer.add_scalar('loss', 2.0, 1)", "run.log({'loss': 0.5})"):
        assert resumed.run(use).error is not None, use
    assert resumed.value("mlflow.active_run()") is None
    # nothing was made again where the records were
    assert not log_dir.exists() and not (root / "wandb").exists() and not db.exists()
