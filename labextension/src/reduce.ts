/**
 * How an event changes what the browser knows of a kernel, before the REST fetch that
 * follows each event confirms it.
 */
import { isWarned } from './policy';
import {
  EventName,
  IGpuckptEvent,
  IKernel,
  ILastCheckpoint,
  Phase
} from './types';

/** Schema ids of this project's events start with this. */
export const SCHEMA_PREFIX = 'https://events.jupyter.org/jupyter_gpuckpt/';

const EVENTS: EventName[] = [
  'checkpoint',
  'suspend',
  'resume',
  'restore-after-failure'
];
const PHASES: Phase[] = [
  'started',
  'progress',
  'released',
  'done',
  'failed',
  'writing',
  'write_failed',
  'durable'
];

/**
 * A jupyter_gpuckpt event from an event-stream message, or null for anything else.
 *
 * JupyterLab's event manager hands over the server's message: the event's data plus
 * `schema_id` (and jupyter_events' own `__schema__`, `__timestamp__`...).
 */
export function parseEvent(message: unknown): IGpuckptEvent | null {
  if (!message || typeof message !== 'object') {
    return null;
  }
  const raw = message as Record<string, unknown>;
  const schema = raw.schema_id ?? raw.__schema__;
  if (typeof schema !== 'string' || !schema.startsWith(SCHEMA_PREFIX)) {
    return null;
  }
  const name = schema.slice(SCHEMA_PREFIX.length).split('/')[0] as EventName;
  if (!EVENTS.includes(name)) {
    return null;
  }
  if (
    typeof raw.kernel_id !== 'string' ||
    !PHASES.includes(raw.phase as Phase)
  ) {
    return null;
  }
  const event: Record<string, unknown> = { event: name };
  for (const [key, value] of Object.entries(raw)) {
    if (key !== 'schema_id' && !key.startsWith('__')) {
      event[key] = value;
    }
  }
  return event as unknown as IGpuckptEvent;
}

function progressOf(event: IGpuckptEvent): number | null {
  const { bytes_done: done, bytes_total: total } = event;
  if (done === undefined || !total) {
    return null;
  }
  return Math.min(1, done / total);
}

/** The kernel's last checkpoint after an event that names one (`released`, `done`). */
function checkpointOf(
  kernel: IKernel,
  event: IGpuckptEvent,
  now: number
): ILastCheckpoint | null {
  const last = kernel.last_checkpoint;
  if (!event.checkpoint_id) {
    return last;
  }
  const same = last?.id === event.checkpoint_id;
  // `released` and `done` of one suspend name the same checkpoint: it is not newer
  const again = same && event.event === 'suspend';
  return {
    ...(last ?? {}),
    id: event.checkpoint_id,
    bytes_total: event.bytes ?? last?.bytes_total,
    time: again && typeof last?.time === 'number' ? last.time : now / 1000,
    durability: event.durability ?? (same ? last?.durability : undefined)
  };
}

/**
 * The kernel once a suspend freed its GPUs: parked (its process lives on) or suspended;
 * how long it has been so counts from now, or, for a parked kernel whose process the
 * server ended later, from when it was parked.
 */
function released(
  kernel: IKernel,
  next: IKernel,
  event: IGpuckptEvent,
  now: number
): void {
  next.progress = null;
  next.last_error = null;
  next.gpus = [];
  next.received_at = now;
  if (event.mode === 'park') {
    next.state = 'parked';
    next.parked_for = 0;
    next.suspended_for = null;
    return;
  }
  const parkedFor =
    kernel.state === 'parked' && typeof kernel.parked_for === 'number'
      ? kernel.parked_for +
        Math.max(0, (now - (kernel.received_at ?? now)) / 1000)
      : 0;
  next.state = 'suspended';
  next.suspended_for = parkedFor;
  next.parked_for = null;
}

/**
 * The kernel after `event`; `kernel` itself is not changed. An event for a kernel the
 * browser has not fetched yet gives undefined (the fetch after it brings the kernel).
 */
export function applyEvent(
  kernel: IKernel | undefined,
  event: IGpuckptEvent,
  now: number = Date.now()
): IKernel | undefined {
  if (!kernel || kernel.id !== event.kernel_id) {
    return kernel;
  }
  const next: IKernel = { ...kernel, received_at: kernel.received_at ?? now };
  const busy: Record<EventName, IKernel['state']> = {
    checkpoint: kernel.state,
    suspend: 'checkpointing',
    resume: 'restoring',
    'restore-after-failure': 'restoring'
  };
  switch (event.phase) {
    case 'started':
      next.state = busy[event.event];
      next.progress = 0;
      next.last_error = null;
      // the server drops the last operation's notice when a new one starts (not for
      // periodic checkpoints, which the user did not ask for)
      if (event.reason !== 'periodic') {
        next.notice = null;
      }
      break;
    case 'progress':
      next.state = busy[event.event];
      next.progress = progressOf(event) ?? next.progress;
      break;
    case 'released':
      // the GPUs are free; `done` follows (not after a parked kernel's process is ended)
      released(kernel, next, event, now);
      next.last_checkpoint = checkpointOf(kernel, event, now);
      break;
    case 'done':
      next.progress = null;
      next.last_error = null;
      if (event.event === 'suspend') {
        if (kernel.state !== 'suspended' && kernel.state !== 'parked') {
          released(kernel, next, event, now);
        } else if (event.mode === 'park' || event.mode === 'suspend') {
          next.state = event.mode === 'park' ? 'parked' : 'suspended';
        }
        next.gpus = [];
      } else if (event.event !== 'checkpoint') {
        next.state = 'running';
        next.idle_seconds = 0;
        next.received_at = now;
        next.suspended_for = null;
        next.parked_for = null;
      }
      if (event.event !== 'resume' && event.event !== 'restore-after-failure') {
        next.last_checkpoint = checkpointOf(kernel, event, now);
      }
      break;
    case 'failed':
      next.progress = null;
      next.last_error = event.error ?? null;
      // a failure goes back to the previous safe state; a parked kernel that could not be
      // unparked stays parked (parked_for is kept while it restores)
      next.state =
        event.event === 'resume'
          ? typeof kernel.parked_for === 'number'
            ? 'parked'
            : 'suspended'
          : event.event === 'checkpoint'
            ? kernel.state
            : 'running';
      break;
    case 'writing':
      // the write of a staged checkpoint to the store: the kernel's state does not change
      next.write_behind = {
        checkpoint_id: event.checkpoint_id ?? '',
        bytes_done: event.bytes_done,
        bytes_total: event.bytes_total
      };
      break;
    case 'write_failed': {
      if (typeof event.retry_in !== 'number') {
        // not retried: the staged copy is lost; the fetch brings the checkpoint the
        // kernel falls back to, and the notice that says so
        next.write_behind = null;
        break;
      }
      const before = kernel.write_behind;
      const same = before?.checkpoint_id === event.checkpoint_id;
      next.write_behind = {
        checkpoint_id: event.checkpoint_id ?? '',
        attempts: (same ? (before?.attempts ?? 0) : 0) + 1,
        error: event.error ?? ''
      };
      break;
    }
    case 'durable':
      next.write_behind = null;
      if (
        kernel.last_checkpoint &&
        kernel.last_checkpoint.id === event.checkpoint_id
      ) {
        next.last_checkpoint = {
          ...kernel.last_checkpoint,
          durability: 'durable'
        };
      }
      break;
  }
  return next;
}

/**
 * The kernel after its notebook ran something (the kernel went busy or idle): its idle
 * time starts again, without asking the server, and a warned suspend is off (the server
 * voids the warning on activity). Not while a checkpoint or restore is under way: the
 * server's own calls into the kernel make it busy too, and do not count as use.
 */
export function markActivity(
  kernel: IKernel | undefined,
  now: number = Date.now()
): IKernel | undefined {
  if (!kernel || kernel.state !== 'running' || kernel.progress !== null) {
    return kernel;
  }
  const next: IKernel = { ...kernel, idle_seconds: 0, received_at: now };
  if (isWarned(kernel.policy)) {
    next.policy = null;
  }
  return next;
}

/** Which commands apply to a kernel in this state. */
export function canSuspend(kernel: IKernel | undefined): boolean {
  return (
    !!kernel &&
    kernel.suspendable &&
    kernel.state === 'running' &&
    kernel.progress === null
  );
}

/** Park: suspend, keeping the process (the server suspends where the driver cannot park). */
export function canPark(kernel: IKernel | undefined): boolean {
  return canSuspend(kernel);
}

/** Resume: restore a suspended kernel, or unpark a parked one. */
export function canResume(kernel: IKernel | undefined): boolean {
  return (
    !!kernel && (kernel.state === 'suspended' || kernel.state === 'parked')
  );
}

export function canCheckpoint(kernel: IKernel | undefined): boolean {
  return !!kernel && kernel.state === 'running' && kernel.progress === null;
}

/**
 * What to offer for the last restore's report: `ask` (a Rebuild button) when the report
 * names cells to re-run and none ran since; `always` when the server re-runs them by itself
 * (a button would run them twice); null when there is nothing to rebuild or the admin
 * turned rebuilds off.
 */
export function rebuildOffer(
  kernel: IKernel | undefined
): 'ask' | 'always' | null {
  const report = kernel?.report;
  if (!report || !report.cells_to_rerun?.length || report.rebuilt) {
    return null;
  }
  const setting = kernel?.rebuild_skipped ?? 'ask';
  return setting === 'never' ? null : setting;
}

/** The Rebuild button applies: offered, and the kernel can run cells now. */
export function canRebuild(kernel: IKernel | undefined): boolean {
  return rebuildOffer(kernel) === 'ask' && canCheckpoint(kernel);
}
