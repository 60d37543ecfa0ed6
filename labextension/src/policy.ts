/**
 * The reclaim policy as the browser sees it: its `policy` events (a warning of a coming
 * suspend, a suspend, the user's "Keep running"), its last decision for each kernel (the
 * kernel model's `policy`), and the words for both. Pure, like reduce.ts and format.ts.
 */
import { IKernel, IPolicyDecision, IPolicyEvent, ITrans } from './types';

/** The schema id of the policy event, without its version. */
export const POLICY_SCHEMA =
  'https://events.jupyter.org/jupyter_gpuckpt/policy/';

const ACTIONS: IPolicyEvent['action'][] = ['warn', 'suspend', 'kept'];

/** A `policy` event from an event-stream message, or null for anything else. */
export function parsePolicyEvent(message: unknown): IPolicyEvent | null {
  if (!message || typeof message !== 'object') {
    return null;
  }
  const raw = message as Record<string, unknown>;
  const schema = raw.schema_id ?? raw.__schema__;
  if (typeof schema !== 'string' || !schema.startsWith(POLICY_SCHEMA)) {
    return null;
  }
  const action = raw.action as IPolicyEvent['action'];
  if (typeof raw.kernel_id !== 'string' || !ACTIONS.includes(action)) {
    return null;
  }
  return {
    kernel_id: raw.kernel_id,
    action,
    reason: typeof raw.reason === 'string' ? raw.reason : '',
    due_in:
      typeof raw.due_in === 'number' && isFinite(raw.due_in)
        ? raw.due_in
        : null,
    for_demand: raw.for_demand === true
  };
}

/**
 * A warned suspend: the pass that warned (`warn`) or one of those after it until the
 * suspend falls due (no action, seconds left in `due_in`).
 */
export function isWarned(policy: IPolicyDecision | null | undefined): boolean {
  if (!policy) {
    return false;
  }
  return (
    policy.action === 'warn' ||
    (policy.action === null && typeof policy.due_in === 'number')
  );
}

/**
 * The kernel with its policy's due time on the browser's clock. A decision unchanged since
 * `before` keeps its due time: the server's `due_in` counts from its policy pass, not from
 * each fetch.
 */
export function stampPolicy(
  kernel: IKernel,
  before: IKernel | undefined,
  now: number
): IKernel {
  const policy = kernel.policy;
  if (!policy || typeof policy.due_in !== 'number') {
    return kernel;
  }
  const old = before?.policy;
  const same =
    old &&
    old.due_at !== undefined &&
    old.action === policy.action &&
    old.reason === policy.reason &&
    old.due_in === policy.due_in;
  const due_at = same ? old.due_at : now + policy.due_in * 1000;
  return { ...kernel, policy: { ...policy, due_at } };
}

/**
 * The kernel after a policy event; `kernel` itself is not changed. A `kept` is the user's
 * activity: its idle time starts again.
 */
export function applyPolicyEvent(
  kernel: IKernel | undefined,
  event: IPolicyEvent,
  now: number = Date.now()
): IKernel | undefined {
  if (!kernel || kernel.id !== event.kernel_id) {
    return kernel;
  }
  const { reason, due_in, for_demand } = event;
  switch (event.action) {
    case 'warn':
      return {
        ...kernel,
        policy: {
          action: 'warn',
          reason,
          due_in,
          for_demand,
          due_at: due_in === null ? undefined : now + due_in * 1000
        }
      };
    case 'suspend':
      return {
        ...kernel,
        policy: { action: 'suspend', reason, due_in: null, for_demand }
      };
    case 'kept': {
      const policy: IPolicyDecision = {
        action: null,
        reason: `kept: ${reason}`,
        due_in: null,
        for_demand: false
      };
      return kernel.state === 'running'
        ? { ...kernel, policy, idle_seconds: 0, received_at: now }
        : { ...kernel, policy };
    }
  }
}

/** Seconds until a running kernel's warned suspend falls due at `now` (ms); null if none. */
export function dueIn(kernel: IKernel | undefined, now: number): number | null {
  const policy = kernel?.policy;
  if (!kernel || kernel.state !== 'running' || !policy || !isWarned(policy)) {
    return null;
  }
  if (policy.due_at !== undefined) {
    return Math.max(0, (policy.due_at - now) / 1000);
  }
  if (typeof policy.due_in !== 'number') {
    return null;
  }
  const since =
    kernel.received_at === undefined ? 0 : (now - kernel.received_at) / 1000;
  return Math.max(0, policy.due_in - Math.max(0, since));
}

/** Keep running: the kernel runs and the policy could suspend it. */
export function canKeep(kernel: IKernel | undefined): boolean {
  return !!kernel && kernel.state === 'running' && kernel.suspendable;
}

/** A countdown as the server writes durations: `"42 s"`, `"2 min"`, `"1.5 h"`. */
export function formatDue(seconds: number): string {
  const s = Math.max(0, seconds);
  if (s < 90) {
    return `${Math.ceil(s)} s`;
  }
  if (s < 90 * 60) {
    return `${Math.round(s / 60)} min`;
  }
  return `${(s / 3600).toFixed(1)} h`;
}

/**
 * The reason, without the countdown the server puts before it in the passes after a
 * warning (`warned: suspend in 2 min; idle 28 min ...`): the browser counts down itself.
 */
export function policyReason(policy: IPolicyDecision): string {
  return policy.reason.replace(/^warned: [^;]*;\s*/, '');
}

/** `idle 28 min (timeout 30 min)` -> `idle 28 min, timeout 30 min`, to put in parentheses. */
function flat(reason: string): string {
  return reason.replace(/^(.*\S)\s+\(([^()]*)\)$/, '$1, $2');
}

/** `suspends in 2 min`, or `suspends now` when it is due. */
export function dueText(seconds: number, trans: ITrans): string {
  return seconds < 1
    ? trans.__('suspends now')
    : trans.__('suspends in %1', formatDue(seconds));
}

/**
 * The warning's message: `Untitled.ipynb: the kernel will be suspended in 2 min (idle 28
 * min, timeout 30 min)`.
 */
export function warningText(
  name: string,
  seconds: number,
  reason: string,
  trans: ITrans
): string {
  const why = flat(reason);
  if (seconds < 1) {
    return why
      ? trans.__('%1: the kernel will be suspended now (%2)', name, why)
      : trans.__('%1: the kernel will be suspended now', name);
  }
  return why
    ? trans.__(
        '%1: the kernel will be suspended in %2 (%3)',
        name,
        formatDue(seconds),
        why
      )
    : trans.__(
        '%1: the kernel will be suspended in %2',
        name,
        formatDue(seconds)
      );
}

/** What a card or the status item's tooltip says of the policy. */
export interface IPolicyView {
  /** `Policy: kept: group floor (research keeps 2 GPU(s))`; null when there is nothing to say. */
  line: string | null;
  /** A warned suspend: `Suspends in 2 min: idle 28 min (timeout 30 min)`; else null. */
  warning: string | null;
  /** The countdown alone, for the status bar: `suspends in 2 min`; else null. */
  due: string | null;
}

/**
 * The policy's word on a running kernel at `now` (ms): why it is kept, or when it will be
 * suspended and why. Nothing for other states: a suspended kernel's notice says why.
 */
export function policyView(
  kernel: IKernel,
  now: number,
  trans: ITrans
): IPolicyView {
  const none = { line: null, warning: null, due: null };
  const policy = kernel.policy;
  if (!policy || kernel.state !== 'running' || kernel.progress !== null) {
    return none;
  }
  const seconds = dueIn(kernel, now);
  const reason = policyReason(policy);
  if (seconds !== null) {
    let warning: string;
    if (seconds < 1) {
      warning = reason
        ? trans.__('Suspends now: %1', reason)
        : trans.__('Suspends now');
    } else {
      warning = reason
        ? trans.__('Suspends in %1: %2', formatDue(seconds), reason)
        : trans.__('Suspends in %1', formatDue(seconds));
    }
    return { line: null, warning, due: dueText(seconds, trans) };
  }
  // `suspend`, `checkpoint`, `convert` are under way and the state says so
  if (policy.action !== null || !reason) {
    return none;
  }
  return { line: trans.__('Policy: %1', reason), warning: null, due: null };
}
