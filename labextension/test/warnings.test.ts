import { test } from 'node:test';
import assert from 'node:assert/strict';
import { IKernel, IPolicyEvent } from '../src/types';
import {
  IToaster,
  IToastOptions,
  PolicyWarnings,
  ToastType
} from '../src/warnings';
import { kernelModel, trans } from './fixtures';

interface IToast {
  id: string;
  message: string;
  type: ToastType;
  options: IToastOptions;
}

/** JupyterLab's notifications as far as the warnings use them, kept in a map. */
class FakeToaster implements IToaster {
  toasts = new Map<string, IToast>();
  log: string[] = [];

  emit(message: string, type: ToastType, options: IToastOptions): string {
    const id = `t${++this._count}`;
    this.toasts.set(id, { id, message, type, options });
    this.log.push(`emit ${type}: ${message}`);
    return id;
  }

  update(
    id: string,
    message: string,
    type: ToastType,
    options: IToastOptions
  ): boolean {
    if (!this.toasts.has(id)) {
      return false;
    }
    this.toasts.set(id, { id, message, type, options });
    this.log.push(`update ${type}: ${message}`);
    return true;
  }

  dismiss(id: string): void {
    this.toasts.delete(id);
    this.log.push(`dismiss ${id}`);
  }

  /** The toasts of a type, as [message] lists, for short assertions. */
  of(type: ToastType): string[] {
    return [...this.toasts.values()]
      .filter(t => t.type === type)
      .map(t => t.message);
  }

  /** Click a toast's button as JupyterLab would: closed unless the callback prevents it. */
  click(id: string, label: string): void {
    const toast = this.toasts.get(id);
    const action = toast?.options.actions?.find(a => a.label === label);
    assert.ok(action, `no ${label} on ${id}`);
    let prevented = false;
    action.callback({ preventDefault: () => (prevented = true) });
    if (!prevented) {
      this.dismiss(id);
    }
  }

  private _count = 0;
}

function kernel(overrides: Partial<IKernel> = {}): IKernel {
  return kernelModel({ idle_seconds: 1680, ...overrides });
}

function warn(kernelId = 'k1', dueIn = 120): IPolicyEvent {
  return {
    kernel_id: kernelId,
    action: 'warn',
    reason: 'idle 28 min (timeout 30 min)',
    due_in: dueIn,
    for_demand: false
  };
}

/** A deferred answer to a Keep running. */
function deferred(): {
  promise: Promise<unknown>;
  resolve: () => void;
  reject: (e: Error) => void;
} {
  let resolve!: () => void;
  let reject!: (e: Error) => void;
  const promise = new Promise<unknown>((res, rej) => {
    resolve = () => res(undefined);
    reject = rej;
  });
  return { promise, resolve, reject };
}

function setup(open: Record<string, string> = { k1: 'Untitled.ipynb' }) {
  const toaster = new FakeToaster();
  const clock = { now: 1_000_000 };
  const kept: string[] = [];
  let answer: Promise<unknown> = Promise.resolve();
  const warnings = new PolicyWarnings({
    toaster,
    trans,
    name: id => open[id] ?? null,
    keep: id => {
      kept.push(id);
      return answer;
    },
    now: () => clock.now
  });
  return {
    toaster,
    clock,
    kept,
    warnings,
    answer: (p: Promise<unknown>) => (answer = p)
  };
}

test('a warning for an open notebook: when, why, Keep running, closes when due', () => {
  const { toaster, warnings } = setup();
  warnings.onEvent(warn());
  const [toast] = toaster.toasts.values();
  assert.equal(toast.type, 'warning');
  assert.equal(
    toast.message,
    'Untitled.ipynb: the kernel will be suspended in 2 min (idle 28 min, timeout 30 min)'
  );
  assert.equal(toast.options.autoClose, 120_000);
  assert.deepEqual(
    toast.options.actions?.map(a => [a.label, a.displayType]),
    [['Keep running', 'accent']]
  );
  assert.equal(warnings.shown.get('k1'), toast.id);
});

test('no warning for a kernel whose notebook is not open here, nor when disabled', () => {
  const { toaster, warnings } = setup({});
  warnings.onEvent(warn());
  assert.equal(toaster.toasts.size, 0);
  const other = setup();
  other.warnings.enabled = false;
  other.warnings.onEvent(warn());
  assert.equal(other.toaster.toasts.size, 0);
});

test('warned twice: the warning on screen changes, no second one', () => {
  const { toaster, clock, warnings } = setup();
  warnings.onEvent(warn());
  clock.now += 30_000;
  warnings.onEvent({
    ...warn(),
    due_in: 60,
    reason: 'idle 12 min, 2 waiting for GPUs'
  });
  assert.equal(toaster.toasts.size, 1);
  const [toast] = toaster.toasts.values();
  assert.equal(toast.id, 't1');
  assert.equal(
    toast.message,
    'Untitled.ipynb: the kernel will be suspended in 60 s (idle 12 min, 2 waiting for GPUs)'
  );
  assert.equal(toast.options.autoClose, 60_000);
  // one warning per kernel: another kernel gets its own
  warnings.onEvent(warn('k2'));
  assert.equal(toaster.toasts.size, 1, 'k2 has no notebook open here');
});

test('a warning whose time passed is not changed but shown anew', () => {
  const { toaster, clock, warnings } = setup();
  warnings.onEvent(warn('k1', 10));
  clock.now += 15_000;
  warnings.onEvent(warn('k1', 10));
  assert.deepEqual([...toaster.toasts.keys()], ['t2']);
  assert.ok(toaster.log.includes('dismiss t1'));
});

test('a suspend or a kept takes the warning away', () => {
  for (const action of ['suspend', 'kept'] as const) {
    const { toaster, warnings } = setup();
    warnings.onEvent(warn());
    warnings.onEvent({ ...warn(), action, due_in: null });
    assert.equal(toaster.toasts.size, 0, action);
    assert.equal(warnings.shown.size, 0);
  }
});

test('Keep running: asks the server, then a short success instead of the warning', async () => {
  const { toaster, kept, warnings, answer } = setup();
  const pending = deferred();
  answer(pending.promise);
  warnings.onEvent(warn());
  toaster.click('t1', 'Keep running');
  assert.deepEqual(kept, ['k1']);
  // on its way: the warning stays, says so and has no button to press twice
  const waiting = toaster.toasts.get('t1');
  assert.equal(waiting?.type, 'in-progress');
  assert.equal(waiting?.message, 'Untitled.ipynb: keeping the kernel running…');
  assert.deepEqual(waiting?.options.actions, []);
  await warnings.keep('k1'); // a second press while it is on its way does nothing
  assert.deepEqual(kept, ['k1']);
  pending.resolve();
  await pending.promise;
  await new Promise(resolve => setImmediate(resolve));
  assert.equal(toaster.toasts.has('t1'), false);
  assert.deepEqual(toaster.of('success'), ['Untitled.ipynb: kept running.']);
  assert.equal(
    [...toaster.toasts.values()][0].options.autoClose,
    5000,
    'the success closes by itself'
  );
  assert.equal(warnings.shown.size, 0);
});

test('Keep running that the model or the kept event answered first: one success only', async () => {
  const { toaster, warnings, answer } = setup();
  const pending = deferred();
  answer(pending.promise);
  warnings.onEvent(warn());
  toaster.click('t1', 'Keep running');
  // the kept event comes before the POST's answer
  warnings.onEvent({ ...warn(), action: 'kept', due_in: null });
  pending.resolve();
  await new Promise(resolve => setImmediate(resolve));
  assert.deepEqual(toaster.of('success'), ['Untitled.ipynb: kept running.']);
  assert.equal(toaster.of('warning').length, 0);
});

test("Keep running that fails: the server's message, and the warning stays", async () => {
  const { toaster, clock, kept, warnings, answer } = setup();
  warnings.onEvent(warn());
  clock.now += 40_000;
  answer(Promise.reject(new Error('unknown kernel k1')));
  await warnings.keep('k1');
  assert.deepEqual(toaster.of('error'), [
    'Untitled.ipynb: could not keep the kernel running: unknown kernel k1'
  ]);
  const warning = toaster.toasts.get('t1');
  assert.equal(warning?.type, 'warning');
  assert.equal(
    warning?.message,
    'Untitled.ipynb: the kernel will be suspended in 80 s (idle 28 min, timeout 30 min)'
  );
  assert.equal(warning?.options.autoClose, 80_000);
  // and it can be tried again
  answer(Promise.resolve());
  toaster.click('t1', 'Keep running');
  assert.deepEqual(kept, ['k1', 'k1']);
});

test('sync: a warning the kernel no longer has goes away', () => {
  const warned = kernel({
    policy: { action: 'warn', reason: 'idle', due_in: 120, for_demand: false }
  });
  const cases: [string, Map<string, IKernel>, boolean, boolean][] = [
    ['still warned', new Map([['k1', warned]]), true, true],
    // the user ran a cell: markActivity dropped the warning
    [
      'ran a cell',
      new Map([['k1', { ...warned, policy: null }]]),
      false,
      false
    ],
    [
      'kept elsewhere',
      new Map([
        [
          'k1',
          {
            ...warned,
            policy: {
              action: null,
              reason: 'kept: the user chose Keep running',
              due_in: null,
              for_demand: false
            }
          }
        ]
      ]),
      true,
      false
    ],
    [
      'suspended',
      new Map([['k1', { ...warned, state: 'suspended' }]]),
      true,
      false
    ],
    ['parked', new Map([['k1', { ...warned, state: 'parked' }]]), false, false],
    [
      'checkpointing',
      new Map([['k1', { ...warned, state: 'checkpointing' }]]),
      false,
      false
    ],
    // a server that does not say: its events decide
    ['no policy field', new Map([['k1', kernel()]]), true, true],
    // not fetched yet, say: only a fetch tells it is gone
    ['not in the model', new Map(), false, true],
    ['gone after a fetch', new Map(), true, false]
  ];
  for (const [what, kernels, fetched, stays] of cases) {
    const { toaster, warnings } = setup();
    warnings.onEvent(warn());
    warnings.sync(kernels, fetched);
    assert.equal(toaster.toasts.size, stays ? 1 : 0, what);
  }
});

test('sync after a fetch: a warning the page missed is shown once', () => {
  const { toaster, clock, warnings } = setup({
    k1: 'Untitled.ipynb',
    k2: 'b.ipynb'
  });
  const warned = kernel({
    received_at: clock.now,
    policy: {
      action: null,
      reason: 'warned: suspend in 80 s; idle 29 min (timeout 30 min)',
      due_in: 80,
      for_demand: false,
      due_at: clock.now + 80_000
    }
  });
  const kernels = new Map([
    ['k1', warned],
    ['k2', kernel({ id: 'k2' })]
  ]);
  warnings.sync(kernels, false);
  assert.equal(toaster.toasts.size, 0, 'only after a fetch');
  warnings.sync(kernels, true);
  assert.deepEqual(toaster.of('warning'), [
    'Untitled.ipynb: the kernel will be suspended in 80 s (idle 29 min, timeout 30 min)'
  ]);
  // the user closed it: the next fetches do not bring it back
  toaster.dismiss('t1');
  clock.now += 10_000;
  warnings.sync(kernels, true);
  assert.equal(toaster.toasts.size, 0);
  // a warning the events told already is not shown twice by the fetch after them
  const other = setup();
  other.warnings.onEvent(warn());
  other.warnings.sync(kernels, true);
  assert.equal(other.toaster.toasts.size, 1);
});

test('dispose takes every warning away', () => {
  const { toaster, warnings } = setup({ k1: 'a.ipynb', k2: 'b.ipynb' });
  warnings.onEvent(warn('k1'));
  warnings.onEvent(warn('k2'));
  assert.equal(toaster.toasts.size, 2);
  warnings.dispose();
  assert.equal(toaster.toasts.size, 0);
});
