"""Slurm's own commands, run by the server's user: the one place that spawns them.

Each command is a template (``c.SlurmCommands.submit = "sudo -u {user} sbatch --parsable
{options} {script}"``), as batchspawner makes them, so that a site can wrap them (sudo, a
wrapper script that reaches a login node) without code. A template is split into words
first and the fields are filled in word by word, with no shell between: ``{options}``
standing alone becomes the arguments the server passes (none, one or many words), every
other field one word's text, so no job script name or comment can inject a command.
Jobs and nodes are read from Slurm's JSON (:mod:`.slurm_jobs`).
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import shlex
from collections.abc import Sequence

from traitlets import Float, Unicode
from traitlets.config import Configurable

from ..errors import PlacementError
from .slurm_jobs import SlurmJob, SlurmNode, read_jobs, read_nodes


class SlurmCommandError(PlacementError):
    """A Slurm command failed; the message is Slurm's own."""


def _template(help: str, default: str) -> Unicode:  # type: ignore[type-arg]
    return Unicode(default, config=True, help=f"{help} Fields: {{options}} (the server's arguments, as "
                                             "separate words), {user} (the server's user) and those named.")


class SlurmCommands(Configurable):
    """The Slurm commands the server runs, as templates (see the module's docstring)."""

    prefix = Unicode("", config=True, help="Words put before every Slurm command, e.g. 'sudo -E -u {user}' or "
                                           "a wrapper that runs it on a login node (it must keep the words "
                                           "as they are given: ssh joins them into one shell line).")
    submit = _template("Submits a kernel job; prints the job id first (sbatch --parsable). Field {script}: "
                       "the job script, in the store every node sees.", "sbatch --parsable {options} {script}")
    cancel = _template("Cancels a kernel job, or sends its steps a signal (options: --signal=NAME). Field "
                       "{job_id}.", "scancel {options} {job_id}")
    jobs = _template("Prints jobs as JSON (options: --states=..., --user=...; Slurm 22.05 ignores them and "
                     "prints every job, which the server filters).", "squeue --json {options}")
    nodes = _template("Prints the nodes and their states as JSON.", "sinfo --json --Node")
    partitions = _template("Prints the partitions, the default one marked '*' (the one thing Slurm 22.05's "
                           "JSON does not say).", "sinfo --noheader --format=%P")
    timeout = Float(30.0, config=True, help="Seconds a Slurm command may take (slurmctld answers in "
                                            "milliseconds when it is up).")

    def argv(self, template: str, options: Sequence[str] = (), **fields: str) -> list[str]:
        """The words of ``prefix`` and ``template`` with ``fields`` filled in."""
        values = {"user": getpass.getuser(), **fields}
        words: list[str] = []
        for word in shlex.split(self.prefix) + shlex.split(template):
            if word == "{options}":
                words.extend(options)
            else:
                try:
                    words.append(word.format(**values))
                except (KeyError, IndexError, ValueError) as e:
                    raise SlurmCommandError(f"Slurm command template {template!r} has an unknown field: {e}") from None
        return words

    def programs(self, *more: str) -> list[str]:
        """The programs the templates (and the ``more`` commands, prefixed) start, to look for on the PATH."""
        first = shlex.split(self.prefix)[:1]
        templates = (self.submit, self.cancel, self.jobs, self.nodes, self.partitions, *more)
        return sorted({(first or shlex.split(t)[:1])[0] for t in templates if first or t.strip()})

    async def run(self, argv: list[str], env: dict[str, str] | None = None) -> str:
        """Run a Slurm command; its stdout.

        Raises
        ------
        PlacementError
            The command is not installed, timed out, or failed (with Slurm's message).
        """
        try:
            process = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                           stdout=asyncio.subprocess.PIPE,
                                                           stderr=asyncio.subprocess.PIPE, env=env)
        except FileNotFoundError:
            raise PlacementError(f"{argv[0]} is not on the Jupyter server's PATH: Slurm kernels need Slurm's "
                                 "client commands (Debian: apt-get install slurm-client) and SLURM_CONF pointing "
                                 "at the cluster's slurm.conf (or SlurmCommands templates that reach them)") from None
        try:
            out, err = await asyncio.wait_for(process.communicate(), self.timeout)
        except TimeoutError:
            process.kill()
            await process.wait()
            raise SlurmCommandError(f"{argv[0]} did not answer within {self.timeout:.0f} s "
                                    "(is slurmctld up?)") from None
        except asyncio.CancelledError:
            # the server stops (its policy loop reads the queue often): reap the command now, or
            # its transport is collected after the event loop has closed
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise
        if process.returncode:
            text = err.decode(errors="replace").strip() or out.decode(errors="replace").strip()
            name = argv[0].rsplit("/", 1)[-1]
            message = "; ".join(line.strip().removeprefix(f"{name}: ").removeprefix("error: ")
                                for line in text.splitlines() if line.strip())
            raise SlurmCommandError(f"{name} failed: {message or f'exit status {process.returncode}'}")
        return out.decode(errors="replace")

    async def submit_job(self, script: str, options: list[str], env: dict[str, str]) -> str:
        """Submit ``script`` with ``options``, in environment ``env``; the job id."""
        out = await self.run(self.argv(self.submit, options, script=script), env=env)
        return out.strip().split(";")[0]

    async def cancel_job(self, job_id: str, signal: str | None = None) -> None:
        """Cancel the job (or send its steps ``signal``); a job already gone or ending is fine,
        as the queue shows it (not as scancel's message words it)."""
        try:
            await self.run(self.argv(self.cancel, [f"--signal={signal}"] if signal else [], job_id=job_id))
        except SlurmCommandError:
            job = next((j for j in await self.own_jobs() if j.job_id == job_id), None)
            if job is not None and not job.ended and job.state != "COMPLETING":
                raise

    async def read_jobs(self, *options: str) -> list[SlurmJob]:
        """The jobs the jobs template prints with ``options`` (filter them again: 22.05 does not)."""
        return read_jobs(await self.run(self.argv(self.jobs, options)))

    async def own_jobs(self) -> list[SlurmJob]:
        """Every job of the server's user Slurm still knows, ended ones included."""
        user = getpass.getuser()
        return [job for job in await self.read_jobs("--states=all", f"--user={user}") if job.user == user]

    async def read_nodes(self) -> dict[str, SlurmNode]:
        """Node name -> its states (``IDLE``, ``MIXED``, ``DOWN``, ``NOT_RESPONDING``, ...) and partitions."""
        return read_nodes(await self.run(self.argv(self.nodes)))

    async def default_partition(self) -> str:
        """The cluster's default partition, where a job asking for none goes ('' if none is)."""
        out = await self.run(self.argv(self.partitions))
        return next((p.removesuffix("*") for p in out.split() if p.endswith("*")), "")
