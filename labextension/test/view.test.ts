import { test } from 'node:test';
import assert from 'node:assert/strict';
import { IKernel, IRestoreReport } from '../src/types';
import { gpuView, kernelCardView } from '../src/view';
import { kernelModel, trans } from './fixtures';

const NOW = 1_000_000;
const GiB = 1024 ** 3;

function kernel(overrides: Partial<IKernel> = {}): IKernel {
  return kernelModel({
    id: 'abcdef0123456789',
    received_at: NOW,
    ...overrides
  });
}

function report(overrides: Partial<IRestoreReport> = {}): IRestoreReport {
  return {
    id: 'c1',
    restored: ['x'],
    nbytes: 10,
    skipped: [{ name: 'g', type: 'generator', reason: 'cannot pickle' }],
    lost: [],
    warnings: [],
    seconds: 0.5,
    cells_to_rerun: [2, 3],
    text: 'Restored 1 variable(s)',
    ...overrides
  };
}

test('a running kernel: name, badge, one line per GPU, idle time, checkpoint', () => {
  const view = kernelCardView(
    kernel({
      gpus: [
        {
          uuid: 'GPU-1',
          index: 0,
          name: 'NVIDIA H100',
          memory_total: 80 * GiB,
          memory_used: 12 * GiB,
          utilization: 5
        }
      ],
      last_checkpoint: { id: 'c', time: NOW / 1000 - 180, bytes_total: 3789 }
    }),
    'deep/dir/Untitled.ipynb',
    NOW + 60_000,
    trans
  );
  assert.equal(view.name, 'Untitled.ipynb');
  assert.equal(view.title, 'deep/dir/Untitled.ipynb (kernel abcdef0123456789)');
  assert.equal(view.state, 'running');
  assert.equal(view.stateLabel, 'running');
  assert.equal(view.busy, false);
  assert.deepEqual(view.gpus, ['GPU 0: NVIDIA H100 (12.0 GiB/80.0 GiB)']);
  assert.equal(view.idle, 'idle 1m');
  assert.equal(view.checkpoint, 'checkpoint 4m ago · 3.7 KiB');
  assert.deepEqual(view.can, {
    checkpoint: true,
    suspend: true,
    park: true,
    resume: false,
    rebuild: false,
    keep: true
  });
  assert.equal(view.writeFailed, false);
  assert.equal(view.report, null);
});

test('a suspended kernel: GPUs released, how long, resume only', () => {
  const view = kernelCardView(
    kernel({ state: 'suspended', suspended_for: 3600, idle_seconds: 9999 }),
    null,
    NOW + 5 * 60_000,
    trans
  );
  assert.equal(view.name, 'kernel abcdef01');
  assert.equal(view.title, 'kernel abcdef0123456789');
  assert.deepEqual(view.gpus, ['GPUs released']);
  assert.equal(view.idle, 'suspended for 1h 5m');
  assert.equal(view.checkpoint, 'no checkpoint');
  assert.deepEqual(view.can, {
    checkpoint: false,
    suspend: false,
    park: false,
    resume: true,
    rebuild: false,
    keep: false
  });
});

test('a parked kernel: GPUs released, memory in host memory, how long, resume only', () => {
  const view = kernelCardView(
    kernel({
      state: 'parked',
      parked_for: 120,
      last_checkpoint: {
        id: 'c',
        time: NOW / 1000 - 120,
        bytes_total: 1024,
        durability: 'durable'
      }
    }),
    'a.ipynb',
    NOW + 60_000,
    trans
  );
  assert.equal(view.state, 'parked');
  assert.equal(view.stateLabel, 'parked');
  assert.deepEqual(view.gpus, [
    'GPUs released; their memory is parked in host memory'
  ]);
  assert.equal(view.idle, 'parked for 3m');
  assert.equal(view.checkpoint, 'checkpoint 3m ago · 1.0 KiB');
  assert.deepEqual(view.can, {
    checkpoint: false,
    suspend: false,
    park: false,
    resume: true,
    rebuild: false,
    keep: false
  });
});

test('a staged checkpoint: in host memory while written, the error if a write failed', () => {
  const last = {
    id: 'c1',
    time: NOW / 1000 - 60,
    bytes_total: 2 * GiB,
    durability: 'staged' as const
  };
  const writing = kernelCardView(
    kernel({
      state: 'suspended',
      last_checkpoint: last,
      write_behind: {
        checkpoint_id: 'c1',
        bytes_done: 0.8 * GiB,
        bytes_total: 2 * GiB
      }
    }),
    'a.ipynb',
    NOW,
    trans
  );
  assert.equal(
    writing.checkpoint,
    'checkpoint 1m ago · 2.0 GiB · in host memory, writing 40%'
  );
  assert.equal(writing.writeFailed, false);
  const failed = kernelCardView(
    kernel({
      state: 'suspended',
      last_checkpoint: last,
      write_behind: { checkpoint_id: 'c1', attempts: 3, error: 'disk full' }
    }),
    'a.ipynb',
    NOW,
    trans
  );
  assert.equal(
    failed.checkpoint,
    'checkpoint 1m ago · 2.0 GiB · write failed, retrying: disk full'
  );
  assert.equal(failed.writeFailed, true);
  const durable = kernelCardView(
    kernel({
      state: 'suspended',
      last_checkpoint: { ...last, durability: 'durable' }
    }),
    'a.ipynb',
    NOW,
    trans
  );
  assert.equal(durable.checkpoint, 'checkpoint 1m ago · 2.0 GiB');
});

test('a busy kernel shows progress in its badge and no idle time', () => {
  const view = kernelCardView(
    kernel({ state: 'restoring', progress: 0.25 }),
    'a.ipynb',
    NOW,
    trans
  );
  assert.equal(view.stateLabel, 'restoring 25%');
  assert.equal(view.busy, true);
  assert.equal(view.idle, null);
  assert.deepEqual(view.gpus, ['no GPU']);
});

test('the report offers a rebuild with what was not restored', () => {
  const view = kernelCardView(
    kernel({
      report: report({ lost: [{ name: 'h', reason: 'gone' }] }),
      rebuild_skipped: 'ask'
    }),
    'a.ipynb',
    NOW,
    trans
  );
  assert.deepEqual(view.report, {
    kind: 'offer',
    text: 'Not restored: h (gone); g (cannot pickle). Rebuild re-runs cells 2, 3.',
    offer: 'ask',
    failed: false
  });
  assert.equal(view.can.rebuild, true);

  const automatic = kernelCardView(
    kernel({ report: report(), rebuild_skipped: 'always' }),
    'a.ipynb',
    NOW,
    trans
  );
  assert.equal(automatic.report?.offer, 'always');
  assert.equal(
    automatic.report?.text,
    'Not restored: g (cannot pickle). The server re-runs cells 2, 3 to rebuild them.'
  );
  assert.equal(automatic.can.rebuild, false);

  const never = kernelCardView(
    kernel({ report: report(), rebuild_skipped: 'never' }),
    'a.ipynb',
    NOW,
    trans
  );
  assert.equal(never.report, null);

  const one = kernelCardView(
    kernel({ report: report({ cells_to_rerun: [1] }) }),
    'a.ipynb',
    NOW,
    trans
  );
  assert.equal(
    one.report?.text,
    'Not restored: g (cannot pickle). Rebuild re-runs cell 1.'
  );
});

test('after a rebuild the card says what it did, once', () => {
  const text = 'Re-ran cells 2, 3: g is back.';
  const view = kernelCardView(
    kernel({
      notice: text,
      report: report({
        rebuilt: {
          cells: [2, 3],
          names: ['g'],
          missing: [],
          failed: null,
          text
        }
      })
    }),
    'a.ipynb',
    NOW,
    trans
  );
  assert.deepEqual(view.report, {
    kind: 'rebuilt',
    text,
    offer: null,
    failed: false
  });
  assert.equal(view.notice, null, 'the notice repeats the report: shown once');
  assert.equal(view.can.rebuild, false);

  const failed = kernelCardView(
    kernel({
      notice: 'something else',
      report: report({
        rebuilt: {
          cells: [2],
          names: [],
          missing: ['g'],
          failed: { cell: 2, error: 'NameError' },
          text: 'Cell 2 failed'
        }
      })
    }),
    'a.ipynb',
    NOW,
    trans
  );
  assert.equal(failed.report?.failed, true);
  assert.equal(failed.notice, 'something else');
});

test('errors and waits are shown as they are', () => {
  const view = kernelCardView(
    kernel({
      state: 'suspended',
      last_error: 'no GPU free',
      waiting_for_gpus: 'waiting for 1 GPU(s); 0 free'
    }),
    'a.ipynb',
    NOW,
    trans
  );
  assert.equal(view.error, 'no GPU free');
  assert.equal(view.waiting, 'waiting for 1 GPU(s); 0 free');
  assert.equal(kernelCardView(kernel(), 'a.ipynb', NOW, trans).waiting, null);
});

test('the policy: why a running kernel is kept, or when it is suspended', () => {
  const kept = kernelCardView(
    kernel({
      policy: {
        action: null,
        reason: 'kept: group floor (research keeps 2 GPU(s))',
        due_in: null,
        for_demand: false
      }
    }),
    'a.ipynb',
    NOW,
    trans
  );
  assert.equal(
    kept.policy,
    'Policy: kept: group floor (research keeps 2 GPU(s))'
  );
  assert.equal(kept.warning, null);
  assert.equal(kept.can.keep, true);

  const warned = kernelCardView(
    kernel({
      idle_seconds: 1680,
      policy: {
        action: 'warn',
        reason: 'idle 28 min (timeout 30 min)',
        due_in: 120,
        for_demand: false,
        due_at: NOW + 120_000
      }
    }),
    'a.ipynb',
    NOW + 40_000,
    trans
  );
  assert.equal(warned.policy, null, 'the warning says it all');
  assert.equal(
    warned.warning,
    'Suspends in 80 s: idle 28 min (timeout 30 min)'
  );
  assert.equal(warned.idle, 'idle 28m');

  // a suspended kernel: its notice says why, the policy has nothing to add
  const suspended = kernelCardView(
    kernel({
      state: 'suspended',
      notice: 'Suspended by policy: idle 30 min (timeout 30 min).',
      policy: {
        action: null,
        reason: 'suspended',
        due_in: null,
        for_demand: false
      }
    }),
    'a.ipynb',
    NOW,
    trans
  );
  assert.equal(suspended.policy, null);
  assert.equal(suspended.warning, null);
  assert.equal(suspended.can.keep, false);
  assert.equal(
    suspended.notice,
    'Suspended by policy: idle 30 min (timeout 30 min).'
  );
  // a server without the policy's word
  const old = kernelCardView(kernel(), 'a.ipynb', NOW, trans);
  assert.equal(old.policy, null);
  assert.equal(old.warning, null);
});

test('gpuView: index and name, memory, use and holder', () => {
  const gpu = {
    uuid: 'GPU-1',
    index: 1,
    name: 'NVIDIA A100',
    memory_total: 80 * GiB,
    memory_used: 2 * GiB,
    utilization: 35
  };
  assert.deepEqual(gpuView(gpu, 'a.ipynb', trans), {
    name: '1 · NVIDIA A100',
    detail: '2.0 GiB / 80.0 GiB · 35% · a.ipynb',
    title: 'GPU-1',
    free: false
  });
  const free = gpuView({ ...gpu, index: undefined }, null, trans);
  assert.equal(free.name, 'NVIDIA A100');
  assert.equal(free.detail, '2.0 GiB / 80.0 GiB · 35% · free');
  assert.equal(free.free, true);
});
