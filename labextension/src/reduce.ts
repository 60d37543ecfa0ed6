/**
 * How an event changes what the browser knows of a kernel, before the REST fetch that
 * follows each event confirms it.
 */
import { EventName, IGpuckptEvent, IKernel, Phase } from './types';

/** Schema ids of this project's events start with this. */
export const SCHEMA_PREFIX = 'https://events.jupyter.org/jupyter_gpuckpt/';

const EVENTS: EventName[] = [
  'checkpoint',
  'suspend',
  'resume',
  'restore-after-failure'
];
const PHASES: Phase[] = ['started', 'progress', 'done', 'failed'];

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
    case 'done':
      next.progress = null;
      next.last_error = null;
      if (event.event === 'suspend') {
        next.state = 'suspended';
        next.gpus = [];
      } else if (event.event !== 'checkpoint') {
        next.state = 'running';
        next.idle_seconds = 0;
        next.received_at = now;
      }
      if (
        event.checkpoint_id &&
        event.event !== 'resume' &&
        event.event !== 'restore-after-failure'
      ) {
        next.last_checkpoint = {
          ...(kernel.last_checkpoint ?? {}),
          id: event.checkpoint_id,
          bytes_total: event.bytes ?? kernel.last_checkpoint?.bytes_total,
          time: now / 1000
        };
      }
      break;
    case 'failed':
      next.progress = null;
      next.last_error = event.error ?? null;
      // a failure goes back to the previous safe state
      next.state =
        event.event === 'resume'
          ? 'suspended'
          : event.event === 'checkpoint'
            ? kernel.state
            : 'running';
      break;
  }
  return next;
}

/**
 * The kernel after its notebook ran something (the kernel went busy or idle): its idle
 * time starts again, without asking the server. Not while a checkpoint or restore is under
 * way: the server's own calls into the kernel make it busy too, and do not count as use.
 */
export function markActivity(
  kernel: IKernel | undefined,
  now: number = Date.now()
): IKernel | undefined {
  if (!kernel || kernel.state !== 'running' || kernel.progress !== null) {
    return kernel;
  }
  return { ...kernel, idle_seconds: 0, received_at: now };
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

export function canResume(kernel: IKernel | undefined): boolean {
  return !!kernel && kernel.state === 'suspended';
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
