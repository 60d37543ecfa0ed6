/**
 * Words and numbers shown to the user: states, bytes, durations, GPUs.
 */
import { dueIn, dueText } from './policy';
import { IGPU, IGpuckptEvent, IKernel, ITrans, IWriteBehind } from './types';

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

/** `1536` -> `"1.5 KiB"`, as the server's `human_bytes` writes it. */
export function formatBytes(n: number | null | undefined): string {
  if (n === null || n === undefined || !isFinite(n)) {
    return '?';
  }
  let value = n;
  for (const unit of UNITS) {
    if (Math.abs(value) < 1024 || unit === 'TiB') {
      return unit === 'B'
        ? `${Math.round(value)} B`
        : `${value.toFixed(1)} ${unit}`;
    }
    value /= 1024;
  }
  return '?';
}

/** A duration in seconds, short: `"42s"`, `"5m"`, `"2h 5m"`, `"3d 4h"`. */
export function formatDuration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) {
    return '?';
  }
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) {
    return `${s}s`;
  }
  const m = Math.floor(s / 60);
  if (m < 60) {
    return `${m}m`;
  }
  const h = Math.floor(m / 60);
  if (h < 24) {
    return m % 60 ? `${h}h ${m % 60}m` : `${h}h`;
  }
  const d = Math.floor(h / 24);
  return h % 24 ? `${d}d ${h % 24}h` : `${d}d`;
}

/** `0.423` -> `"42%"`; null when there is no progress to show. */
export function formatProgress(progress: number | null | undefined): string {
  if (progress === null || progress === undefined || !isFinite(progress)) {
    return '';
  }
  return `${Math.round(Math.min(1, Math.max(0, progress)) * 100)}%`;
}

/**
 * The state to show: `running`, `checkpointing 40%`, `suspended`, `parked`, `restoring 10%`,
 * `failed`.
 */
export function formatState(kernel: IKernel, trans: ITrans): string {
  const pct = formatProgress(kernel.progress);
  switch (kernel.state) {
    case 'running':
      // a checkpoint of a running kernel keeps it running, with progress
      return kernel.progress === null
        ? trans.__('running')
        : trans.__('checkpointing %1', pct).trim();
    case 'checkpointing':
      return trans.__('checkpointing %1', pct).trim();
    case 'restoring':
      return trans.__('restoring %1', pct).trim();
    case 'suspended':
      return trans.__('suspended');
    case 'parked':
      return trans.__('parked');
    case 'failed':
      return trans.__('failed');
    default:
      return String(kernel.state);
  }
}

/** `"NVIDIA A100 (12.0/80.0 GiB)"` for one GPU. */
export function formatGpu(gpu: IGPU): string {
  return `${gpu.name} (${formatBytes(gpu.memory_used)}/${formatBytes(
    gpu.memory_total
  )})`;
}

/** The GPUs a kernel holds, or "no GPU". */
export function formatGpus(gpus: IGPU[], trans: ITrans): string {
  if (!gpus.length) {
    return trans.__('no GPU');
  }
  return gpus.map(formatGpu).join(', ');
}

/** `on node1 (Slurm job 123)` for a kernel on another node; null for a local one. */
export function formatPlace(kernel: IKernel, trans: ITrans): string | null {
  if (kernel.placement !== 'slurm' || !kernel.node) {
    return null;
  }
  return kernel.job_id
    ? trans.__('on %1 (Slurm job %2)', kernel.node, kernel.job_id)
    : trans.__('on %1', kernel.node);
}

/** Seconds idle now, from what the server said and how long ago it said it. */
export function idleSeconds(kernel: IKernel, now: number): number | null {
  if (kernel.idle_seconds === null || kernel.idle_seconds === undefined) {
    return null;
  }
  const since =
    kernel.received_at === undefined ? 0 : (now - kernel.received_at) / 1000;
  return kernel.idle_seconds + Math.max(0, since);
}

/** Seconds since the last checkpoint, or null if there is none. */
export function checkpointAge(kernel: IKernel, now: number): number | null {
  const time = kernel.last_checkpoint?.time;
  return time === undefined || time === null
    ? null
    : Math.max(0, now / 1000 - time);
}

/** The write to the store of the kernel's last checkpoint, while it is only staged. */
function stagedWrite(kernel: IKernel): { write: IWriteBehind | null } | null {
  const last = kernel.last_checkpoint;
  if (!last || last.durability !== 'staged') {
    return null;
  }
  const write = kernel.write_behind ?? null;
  // a write of an older checkpoint is not this one's
  return {
    write: write && write.checkpoint_id === last.id ? write : null
  };
}

function writeProgress(write: IWriteBehind | null): string {
  return write?.bytes_total
    ? formatProgress((write.bytes_done ?? 0) / write.bytes_total)
    : '';
}

/**
 * Where the last checkpoint is, for the card: `in host memory, writing 40%` while it is
 * staged, `write failed, retrying: <error>` after a failed write; null once it is durable
 * (or from a server without staged suspends).
 */
export function durabilityText(kernel: IKernel, trans: ITrans): string | null {
  const staged = stagedWrite(kernel);
  if (!staged) {
    return null;
  }
  const { write } = staged;
  if (write?.error) {
    return trans.__('write failed, retrying: %1', write.error);
  }
  return trans.__('in host memory, writing %1', writeProgress(write)).trim();
}

/** The same, short, for the status bar: `saving 40%`, `write failed, retrying`. */
export function durabilityShortText(
  kernel: IKernel,
  trans: ITrans
): string | null {
  const staged = stagedWrite(kernel);
  if (!staged) {
    return null;
  }
  const { write } = staged;
  if (write?.error) {
    return trans.__('write failed, retrying');
  }
  return trans.__('saving %1', writeProgress(write)).trim();
}

/** The last write of a staged checkpoint failed: worth a warning colour. */
export function writeFailed(kernel: IKernel): boolean {
  return !!stagedWrite(kernel)?.write?.error;
}

/**
 * The status bar's line: state, GPUs, idle time, a suspend the policy warned of
 * (`suspends in 2 min`), checkpoint age.
 */
export function statusText(
  kernel: IKernel,
  now: number,
  trans: ITrans
): string {
  const parts = [formatState(kernel, trans)];
  const durability = durabilityShortText(kernel, trans);
  if (durability) {
    parts.push(durability);
  }
  if (kernel.waiting_for_gpus) {
    parts.push(kernel.waiting_for_gpus);
  } else if (kernel.state !== 'suspended' && kernel.state !== 'parked') {
    // a Slurm node's GPUs are not read from here: their count is what is known
    parts.push(
      kernel.placement === 'slurm'
        ? trans.__('%1 GPU(s)', kernel.gpus.length)
        : formatGpus(kernel.gpus, trans)
    );
  }
  const where = formatPlace(kernel, trans);
  if (where) {
    parts.push(where);
  }
  const idle = idleSeconds(kernel, now);
  if (idle !== null && kernel.state === 'running' && kernel.progress === null) {
    parts.push(trans.__('idle %1', formatDuration(idle)));
  }
  const due = kernel.progress === null ? dueIn(kernel, now) : null;
  if (due !== null) {
    parts.push(dueText(due, trans));
  }
  const age = checkpointAge(kernel, now);
  parts.push(
    age === null
      ? trans.__('no checkpoint')
      : trans.__('checkpoint %1 ago', formatDuration(age))
  );
  return parts.join(' · ');
}

/** The skipped variables of a checkpoint in one sentence, or null if none were. */
export function skippedText(
  skipped: { name: string; reason: string; cells?: number[] }[] | undefined,
  trans: ITrans
): string | null {
  if (!skipped || !skipped.length) {
    return null;
  }
  const names = skipped.map(s => `${s.name} (${s.reason})`).join('; ');
  const cells = [...new Set(skipped.flatMap(s => s.cells ?? []))].sort(
    (a, b) => a - b
  );
  return cells.length
    ? trans.__(
        'Not saved: %1. Re-run cells %2 to rebuild them.',
        names,
        cells.join(', ')
      )
    : trans.__('Not saved: %1.', names);
}

/** The last part of a notebook's path: `"a/b/Untitled.ipynb"` -> `"Untitled.ipynb"`. */
export function baseName(path: string): string {
  const parts = path.split('/').filter(p => p.length);
  return parts.length ? parts[parts.length - 1] : path;
}

/**
 * What an action that found nothing to do did, in a sentence; null for actions that ran
 * (`started`, `done`).
 */
export function outcomeText(
  outcome: string | undefined,
  name: string,
  trans: ITrans
): string | null {
  switch (outcome) {
    case 'already running':
      return trans.__('%1 is already running: nothing to resume.', name);
    case 'already suspended':
      return trans.__('%1 is already suspended.', name);
    case 'already parked':
      return trans.__('%1 is already parked.', name);
    default:
      return null;
  }
}

/** The processes that outlived a suspend, in a sentence; null if none did. */
export function survivorsText(
  survivors: string[] | undefined,
  name: string,
  trans: ITrans
): string | null {
  if (!survivors || !survivors.length) {
    return null;
  }
  return trans.__(
    '%1 was suspended, but %2 process(es) outlived it and may still hold GPU memory, so its GPUs stay held: %3.',
    name,
    survivors.length,
    survivors.join(', ')
  );
}

/** The names a restore did not bring back, with why: `"g (generator); h (lost)"`. */
export function notRestoredText(
  report: {
    skipped?: { name: string; reason: string }[];
    lost?: { name: string; reason: string }[];
    not_set_up?: { name: string; reason: string }[];
  },
  trans: ITrans
): string {
  const missing = [
    ...(report.lost ?? []),
    ...(report.not_set_up ?? []),
    ...(report.skipped ?? [])
  ];
  return missing.length
    ? missing.map(s => `${s.name} (${s.reason})`).join('; ')
    : trans.__('nothing');
}

/**
 * What a suspend that freed the kernel's GPUs tells, by how (`mode`) and where its
 * checkpoint is (`durability`); `durable` overrides the event's, once the staged
 * checkpoint reached the store.
 */
export function releasedText(
  event: IGpuckptEvent,
  name: string,
  trans: ITrans
): string {
  const gpus = event.gpus_released ?? 0;
  if (event.mode === 'park') {
    return trans.__(
      '%1 parked: %2 GPU(s) released; the CUDA driver holds its GPU memory in host memory. Run a cell to resume.',
      name,
      gpus
    );
  }
  if (event.durability === 'staged') {
    return trans.__(
      '%1 suspended: %2 GPU(s) released, %3 in host memory, being written to the store. Run a cell to resume.',
      name,
      gpus,
      formatBytes(event.bytes)
    );
  }
  return trans.__(
    '%1 suspended: %2 GPU(s) released, %3 saved. Run a cell to resume.',
    name,
    gpus,
    formatBytes(event.bytes)
  );
}

/** A failed write of a staged checkpoint to the store, in a sentence. */
export function writeFailedText(
  event: IGpuckptEvent,
  name: string,
  trans: ITrans
): string {
  const error = event.error ?? '';
  return typeof event.retry_in === 'number'
    ? trans.__(
        '%1: its checkpoint could not be written to the store (%2); trying again in %3. Its copy in host memory is kept meanwhile.',
        name,
        error,
        formatDuration(event.retry_in)
      )
    : trans.__(
        '%1: its checkpoint could not be written to the store (%2).',
        name,
        error
      );
}
