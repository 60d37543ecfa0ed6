"""``jupyter gpuckpt doctor``: is this machine ready to checkpoint and suspend GPU kernels?

Each check prints one line, ``OK``, ``WARN`` or ``FAIL`` with a short reason, and any
``FAIL`` makes the exit code 1. It works without a running server; when one is found (as
the other commands find it) it is asked too. The store checked is the one the Jupyter config
names (``c.GPUCheckpointApp.store_root``, loaded as the server loads it), else the found
server's, else the default.
A machine without NVIDIA GPUs is a warning, not a failure: kernels still checkpoint on CPU.
Kernel messages sent unencrypted are a warning; kernels that would not start for want of it a failure.
With Slurm kernelspecs it also checks that every node of their partitions sees the store.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Literal

import zmq
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_server.extension.config import ExtensionConfigManager
from traitlets import HasTraits
from traitlets.config import Config
from traitlets.utils.importstring import import_item

from gpuckpt_store import (
    CheckpointError,
    CheckpointStore,
    SigningKey,
    default_key_path,
    default_root,
    human_bytes,
    list_checkpoints,
    writable_problem,
)
from gpuckpt_store import spare as spare_files

from ..errors import PlacementError
from ..placement import parking
from ..placement.gpus import read_inventory
from ..placement.kernelspec import PROVISIONER_NAME
from ..placement.slurm_commands import SlurmCommands
from ..placement.slurm_jobs import SlurmNode
from ..staging import host_memory
from .client import CLIError, GPUCheckpointClient, find_server

EXTENSION = "jupyter_gpuckpt"
SECTION = "GPUCheckpointApp"
"""The extension's config section (``c.GPUCheckpointApp``)."""
MIN_FREE_BYTES = 1 << 30
"""Less free space than this in the store is a warning."""
CUDA_CHECKPOINT_DRIVER = 570
"""First driver with the CUDA process checkpoint API (DESIGN.md, engine 2)."""
SLURM_CHECK_SECONDS = 15
"""How long the shared-store check waits for a node to run its probe step."""


@dataclass(frozen=True)
class Check:
    status: Literal["OK", "WARN", "FAIL"]
    topic: str
    detail: str

    def line(self) -> str:
        return f"{self.status:<5} {self.topic:<12} {self.detail}"


def check_nvml() -> Check:
    try:
        import pynvml
    except ImportError:
        return Check("WARN", "NVML", "nvidia-ml-py is not installed: no GPU will be assigned")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        return Check("WARN", "NVML", f"cannot start ({e}): no NVIDIA driver here, kernels run without GPUs")
    try:
        driver = str(pynvml.nvmlSystemGetDriverVersion())
        cuda = int(pynvml.nvmlSystemGetCudaDriverVersion())
    finally:
        pynvml.nvmlShutdown()
    major = int(driver.split(".")[0]) if driver.split(".")[0].isdigit() else 0
    park = "has" if major >= CUDA_CHECKPOINT_DRIVER else f"lacks (needs {CUDA_CHECKPOINT_DRIVER}+)"
    return Check("OK", "NVML", f"driver {driver}, CUDA {cuda // 1000}.{cuda % 1000 // 10}; "
                               f"{park} the CUDA checkpoint API")


def check_gpus() -> Check:
    source = " (test inventory from $JUPYTER_GPUCKPT_TEST_GPUS)" if os.environ.get("JUPYTER_GPUCKPT_TEST_GPUS") else ""
    try:
        gpus = read_inventory()
    except (OSError, ValueError, TypeError) as e:
        return Check("FAIL", "GPUs", f"cannot read the GPU inventory{source}: {e}")
    if not gpus:
        return Check("WARN", "GPUs", f"none found{source}; kernels that ask for GPUs cannot start")
    names = ", ".join(f"{g.index}: {g.name} ({human_bytes(g.memory_total)})" for g in gpus)
    return Check("OK", "GPUs", f"{len(gpus)}{source}: {names}")


def check_provisioner() -> Check:
    found = entry_points(group="jupyter_client.kernel_provisioners", name=PROVISIONER_NAME)
    if not found:
        return Check("FAIL", "provisioner", f"entry point {PROVISIONER_NAME} is not registered; "
                                            "reinstall jupyter-gpuckpt")
    entry = next(iter(found))
    try:
        entry.load()
    except Exception as e:  # any import failure makes every gpuckpt kernel fail to start
        return Check("FAIL", "provisioner", f"{entry.value} does not import: {e}")
    return Check("OK", "provisioner", f"{PROVISIONER_NAME} = {entry.value}")


def check_kernelspecs() -> list[Check]:
    specs: dict[str, dict[str, Any]] = KernelSpecManager().get_all_specs()
    checks = []
    for name, found in sorted(specs.items()):
        spec = found["spec"]
        provisioner = spec.get("metadata", {}).get("kernel_provisioner", {})
        if provisioner.get("provisioner_name") != PROVISIONER_NAME:
            continue
        argv = spec.get("argv") or [""]
        gpus = provisioner.get("config", {}).get("gpus", "default")
        if shutil.which(argv[0]) is None:
            checks.append(Check("FAIL", "kernelspec", f"{name}: its interpreter {argv[0]} is missing"))
        elif "--ext=kernel_hooks" not in argv:
            checks.append(Check("WARN", "kernelspec", f"{name}: does not load kernel_hooks (--ext=kernel_hooks)"))
        else:
            checks.append(Check("OK", "kernelspec", f"{name} in {found['resource_dir']} (gpus: {gpus})"))
    return checks or [Check("WARN", "kernelspec", f"no kernelspec selects {PROVISIONER_NAME}; "
                                                  "run `jupyter gpuckpt install-kernelspec --user`")]


def _slurm_partitions() -> set[str]:
    """The partitions the Slurm kernelspecs run kernels in."""
    found = set()
    for entry in KernelSpecManager().get_all_specs().values():
        provisioner = entry["spec"].get("metadata", {}).get("kernel_provisioner", {})
        config = provisioner.get("config", {}) if provisioner.get("provisioner_name") == PROVISIONER_NAME else {}
        if config.get("placement") == "slurm":
            found.add(str(config.get("partition") or ""))
    return found


def _configured(config: Config, cls: type[HasTraits], trait: str) -> Any:
    """``cls``'s ``trait`` as traitlets sets it from ``config``: the section of the most derived
    class in its MRO that sets it, else the trait's default."""
    value = cls.class_traits()[trait].default_value
    for klass in reversed(cls.__mro__):
        section = config.get(klass.__name__)
        if isinstance(section, dict) and trait in section:
            value = section[trait]
    return value


def transport_encryption(config: Config) -> str | None:
    """The ``transport_encryption`` the server's kernels start under: its kernel manager's
    (``c.MappingKernelManager``), or, where that is ``disabled``, each kernel's own
    (``c.KernelManager``); None where this jupyter_server has none (before 2.21)."""
    # here, not at the top: it costs every other command a second (jupyter_events' schemas)
    from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager, ServerKernelManager

    if "transport_encryption" not in AsyncMappingKernelManager.class_trait_names():
        return None
    chosen = config.get("ServerApp", {}).get("kernel_manager_class") or AsyncMappingKernelManager
    mapping = import_item(chosen) if isinstance(chosen, str) else chosen
    policy = str(_configured(config, mapping, "transport_encryption")).lower()
    if policy == "disabled":
        policy = str(_configured(config, ServerKernelManager, "transport_encryption")).lower()
    return policy


def _declares_curve(spec: dict[str, Any]) -> bool:
    """Whether a kernelspec declares CurveZMQ support, as jupyter_client reads it."""
    declared = (spec.get("metadata") or {}).get("supported_encryption") or []
    return "curve" in {str(d).strip().lower() for d in ([declared] if isinstance(declared, str) else declared)}


def check_encryption(config: Config) -> Check:
    """Whether the messages between the server and its gpuckpt kernels are encrypted (CurveZMQ):
    local kernels' where the server's ``transport_encryption`` asks for it and their kernelspec
    declares the support, Slurm kernels' always (their messages cross the network)."""
    specs = {name: found["spec"] for name, found in KernelSpecManager().get_all_specs().items()
             if (found["spec"].get("metadata") or {}).get("kernel_provisioner", {}).get("provisioner_name")
             == PROVISIONER_NAME}
    slurm = sorted(name for name, spec in specs.items()
                   if spec["metadata"]["kernel_provisioner"].get("config", {}).get("placement") == "slurm")
    if not zmq.has("curve"):
        return Check("FAIL" if slurm else "WARN", "encryption",
                     "this pyzmq has no CurveZMQ (libzmq without libsodium): kernels' messages are not encrypted"
                     + (f"; the Slurm kernels of {', '.join(slurm)} cannot start" if slurm else ""))
    policy = transport_encryption(config)
    slurm_too = f"; the Slurm kernels of {', '.join(slurm)} are encrypted always" if slurm else ""
    if policy is None:
        return Check("WARN", "encryption", "this jupyter_server has no transport_encryption (2.21 has): local "
                                           f"kernels' messages are not encrypted{slurm_too}")
    if policy == "disabled":
        return Check("WARN", "encryption", "off: local kernels' messages are not encrypted (set "
                                           f"c.MappingKernelManager.transport_encryption = 'auto'){slurm_too}")
    # under 'required' jupyter_client refuses to start any kernel whose kernelspec does not declare it
    undeclared = sorted(name for name, spec in specs.items()
                        if not _declares_curve(spec) and (policy == "required" or name not in slurm))
    if undeclared:
        effect = "cannot start" if policy == "required" else "run unencrypted"
        return Check("FAIL" if policy == "required" else "WARN", "encryption",
                     f"{policy}, but kernelspec {', '.join(undeclared)} does not declare CurveZMQ support: its kernels "
                     f"{effect}; install it again (jupyter gpuckpt install-kernelspec)")
    return Check("OK", "encryption", f"{policy}: every gpuckpt kernel's messages are encrypted (CurveZMQ)")


def _slurm(*argv: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=SLURM_CHECK_SECONDS + 30)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 1, "", f"{argv[0]} did not answer within "
                                                        f"{SLURM_CHECK_SECONDS + 30} s (is slurmctld up?)")


def check_slurm(root: Path, config: Config) -> list[Check]:
    """For Slurm kernelspecs: Slurm's commands (as ``c.SlurmCommands`` writes them), their
    partitions, and whether every node of each partition sees the store (a job step on each
    node reads a file written here)."""
    partitions = _slurm_partitions()
    if not partitions:
        return []
    commands = SlurmCommands(config=config)
    missing = [program for program in commands.programs("srun") if shutil.which(program) is None]
    if missing:
        return [Check("FAIL", "slurm", f"{', '.join(missing)} not on the PATH: install Slurm's client "
                                       "commands (slurm-client) and set SLURM_CONF")]
    try:
        nodes, default = asyncio.run(_nodes_and_default(commands))
    except PlacementError as e:
        return [Check("FAIL", "slurm", str(e))]
    checks = []
    try:
        store = CheckpointStore(root)
        store.prepare()
        marker = store.base / f".doctor-{secrets.token_hex(8)}"
        marker.write_text(token := secrets.token_hex(16))
    except (OSError, CheckpointError) as e:
        return [Check("FAIL", "slurm", f"cannot write a test file in the store: {e}")]
    try:
        for partition in sorted(partitions):
            names = sorted(name for name, node in nodes.items() if (partition or default) in node.partitions)
            if not names:
                checks.append(Check("FAIL", "slurm", f"partition {partition or '(default)'!r}: no such partition, "
                                                     "or no nodes"))
                continue
            blind: list[str] = []
            busy: list[str] = []
            for node in names:
                seen = _slurm(*commands.argv("srun {options}", [*(["-p", partition] if partition else []), "-w", node,
                                                                 "-N1", "-n1", f"--immediate={SLURM_CHECK_SECONDS}",
                                                                 "cat", str(marker)]))
                if seen.returncode == 0 and seen.stdout.strip() == token:
                    continue
                (busy if "Unable to allocate" in seen.stderr or "immediate" in seen.stderr else blind).append(node)
            detail = f"partition {partition or '(default)'}: {len(names) - len(blind) - len(busy)} of {len(names)} "\
                     f"node(s) see the store {root}"
            if blind:
                checks.append(Check("FAIL", "shared store", f"{detail}; not {', '.join(blind)}: resume and failover "
                                                            "there would not find the checkpoints"))
            else:
                checks.append(Check("WARN" if busy else "OK", "shared store",
                                    detail + (f"; {', '.join(busy)} busy, not checked" if busy else "")))
    finally:
        marker.unlink(missing_ok=True)
    return checks


async def _nodes_and_default(commands: SlurmCommands) -> tuple[dict[str, SlurmNode], str]:
    return await commands.read_nodes(), await commands.default_partition()


def check_extension(config: Config, config_paths: Sequence[str]) -> Check:
    """Whether the server enables the extension, as ``ServerApp.find_server_extensions`` decides:
    its config's ``jpserver_extensions`` over the ``jupyter_server_config.d`` files of ``config_paths``."""
    found: dict[str, bool] = ExtensionConfigManager(  # type: ignore[no-untyped-call]
        read_config_path=list(config_paths)).get_jpserver_extensions()
    enabled = {**found, **config.get("ServerApp", {}).get("jpserver_extensions", {})}
    if enabled.get(EXTENSION):
        return Check("OK", "extension", f"{EXTENSION} is enabled in the Jupyter config")
    return Check("FAIL", "extension", f"{EXTENSION} is {'disabled' if EXTENSION in enabled else 'not enabled'}; "
                                      f"run `jupyter server extension enable {EXTENSION}`")


def check_server(url: str | None, token: str | None) -> tuple[list[Check], dict[str, Any] | None]:
    """The server's answer, and its policy (which names its store) when it answered."""
    try:
        client = GPUCheckpointClient(find_server(url, token), timeout=10.0)
    except CLIError as e:
        return [Check("WARN", "server", f"{e}; only local checks were made")], None
    try:
        policy = dict(client.get("policy"))
        inventory = dict(client.get("gpus"))
    except CLIError as e:
        return [Check("FAIL", "server", str(e))], None
    idle = policy.get("idle_timeout") or 0
    suspends = f"suspends kernels idle {idle:g} s" if idle else "suspends nothing by itself (idle_timeout 0)"
    gpus = inventory.get("gpus") or []
    held = sum(1 for g in gpus if g.get("kernel_id"))
    return [Check("OK", "server", f"{client.server.url} runs the extension; it {suspends}"),
            Check("OK", "server GPUs", f"{inventory.get('node')}: {len(gpus)} GPU(s), {held} held by kernels")], policy


def check_store(root: Path) -> list[Check]:
    problem = writable_problem(root)
    if problem is not None:
        return [Check("FAIL", "store", problem)]
    existing = root
    while not existing.exists():
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    where = str(root) if root.exists() else f"{root} (the first checkpoint creates it)"
    low = free < MIN_FREE_BYTES
    checks = [Check("WARN" if low else "OK", "store", f"{where}: {human_bytes(free)} free" + (", low" if low else ""))]
    try:
        store = CheckpointStore(root)
        ids = store.ids()
        if ids and not store.key.path.exists():
            return [*checks, Check("WARN", "checkpoints", f"{len(ids)}, but no signing key to verify them")]
        infos = list_checkpoints(store)
    except (OSError, CheckpointError) as e:
        return [*checks, Check("FAIL", "checkpoints", f"cannot list them: {e}")]
    bad = [info for info in infos if info.problem]
    if bad:
        return [*checks, Check("WARN", "checkpoints", f"{len(infos)} in {store.base}, {len(bad)} unusable: "
                                                      f"{bad[0].problem}")]
    return [*checks, Check("OK", "checkpoints", f"{len(infos) or 'none yet'} in {store.base}")]


def check_host_memory(policy: dict[str, Any] | None) -> Check:
    """Where suspends stage kernels' state, and how much of it they may take."""
    root = Path(policy["staging_root"]) if policy and policy.get("staging_root") else host_memory.default_root()
    limit_text = str(policy.get("host_memory_limit", "25%")) if policy else "25%"
    try:
        limit = host_memory.parse_limit(limit_text)
    except ValueError as e:
        return Check("FAIL", "host memory", str(e))
    reserve_text = str(policy.get("staging_reserve", "0")) if policy else "0"
    try:
        reserve = host_memory.parse_limit(reserve_text)
    except ValueError as e:
        return Check("FAIL", "host memory", f"staging_reserve: {e}")
    area = host_memory.HostMemory(root, limit, reserve)
    if limit and not root.exists():
        return Check("OK", "host memory", f"suspends stage in {root} (made at the first suspend), up to "
                                          f"{human_bytes(limit)} ({limit_text})")
    problem = area.problem()
    if problem is not None:
        return Check("WARN", "host memory", f"suspends write straight to the store: {problem}")
    made, kept = area.spare(spare_files.RESERVE), area.spare()
    spare = f"; reserve {human_bytes(made)} allocated of {human_bytes(reserve)} ({reserve_text})" if reserve else ""
    if kept > made:
        spare += f"; {human_bytes(kept - made)} kept for the next suspends of kernels that staged before"
    if reserve and made + spare_files.FILL_BYTES // 2 < min(reserve, limit - area.used() - (kept - made)):
        return Check("WARN", "host memory", f"suspends stage in {root}{spare}: the first suspends write into new "
                                            "memory (is the server still making it, or is /dev/shm short?)")
    return Check("OK", "host memory", f"suspends stage in {root}: {human_bytes(area.used())} of "
                                      f"{human_bytes(limit)} ({limit_text}) in use{spare}")


def check_park() -> Check:
    """Whether kernels of this environment can be parked by the CUDA driver."""
    problem = asyncio.run(parking.park_support(sys.executable))
    if problem is None:
        return Check("OK", "park", "the CUDA driver can park kernels of this environment")
    return Check("WARN", "park", f"kernels are suspended, not parked: {problem}")


def check_key(path: Path) -> Check:
    if not path.exists():
        return Check("OK", "signing key", f"{path} does not exist yet (the first checkpoint creates it, mode 0600)")
    try:
        SigningKey(path).check()
    except (OSError, CheckpointError) as e:
        return Check("FAIL", "signing key", str(e))
    return Check("OK", "signing key", f"{path} (mode {path.stat().st_mode & 0o777:04o})")


def run_checks(config: Config, config_paths: Sequence[str], url: str | None = None,
               token: str | None = None) -> list[Check]:
    """Every check, in the order they are printed. ``config`` is the merged Jupyter config (loaded
    from ``config_paths``); its ``GPUCheckpointApp`` settings win over the found server's."""
    server_checks, policy = check_server(url, token)
    settings = {**(policy or {}), **config.get(SECTION, {})}
    root = Path(settings["store_root"]) if settings.get("store_root") else default_root()
    return [check_nvml(), check_gpus(), check_provisioner(), *check_kernelspecs(),
            check_extension(config, config_paths), check_encryption(config), *server_checks, *check_store(root),
            check_host_memory(settings), check_park(), *check_slurm(root, config), check_key(default_key_path())]


def main(config: Config, config_paths: Sequence[str], url: str | None = None, token: str | None = None) -> int:
    """Print the checks; 1 if any failed, else 0."""
    checks = run_checks(config, config_paths, url, token)
    for check in checks:
        print(check.line())
    return 1 if any(check.status == "FAIL" for check in checks) else 0
