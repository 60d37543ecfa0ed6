import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  baseName,
  checkpointAge,
  durabilityShortText,
  durabilityText,
  formatBytes,
  formatDuration,
  formatGpus,
  formatProgress,
  formatState,
  idleSeconds,
  notRestoredText,
  outcomeText,
  releasedText,
  skippedText,
  statusText,
  survivorsText,
  writeFailed,
  writeFailedText
} from '../src/format';
import { IGpuckptEvent, IKernel } from '../src/types';
import { kernelModel, trans } from './fixtures';

function kernel(overrides: Partial<IKernel> = {}): IKernel {
  return kernelModel({ received_at: 1_000_000, ...overrides });
}

test('formatBytes uses binary units like the server', () => {
  assert.equal(formatBytes(0), '0 B');
  assert.equal(formatBytes(1023), '1023 B');
  assert.equal(formatBytes(1536), '1.5 KiB');
  assert.equal(formatBytes(80 * 1024 ** 3), '80.0 GiB');
  assert.equal(formatBytes(5 * 1024 ** 5), '5120.0 TiB');
  assert.equal(formatBytes(undefined), '?');
});

test('formatDuration is short and rounds down', () => {
  assert.equal(formatDuration(0), '0s');
  assert.equal(formatDuration(59.9), '59s');
  assert.equal(formatDuration(60), '1m');
  assert.equal(formatDuration(3600), '1h');
  assert.equal(formatDuration(3600 + 5 * 60), '1h 5m');
  assert.equal(formatDuration(2 * 86400 + 3 * 3600), '2d 3h');
  assert.equal(formatDuration(-5), '0s');
  assert.equal(formatDuration(null), '?');
});

test('formatProgress clamps to 0..100%', () => {
  assert.equal(formatProgress(0.423), '42%');
  assert.equal(formatProgress(1.5), '100%');
  assert.equal(formatProgress(null), '');
});

test('formatState names every state, with progress', () => {
  assert.equal(formatState(kernel(), trans), 'running');
  assert.equal(
    formatState(kernel({ progress: 0.4 }), trans),
    'checkpointing 40%'
  );
  assert.equal(
    formatState(kernel({ state: 'checkpointing', progress: 0.25 }), trans),
    'checkpointing 25%'
  );
  assert.equal(
    formatState(kernel({ state: 'checkpointing' }), trans),
    'checkpointing'
  );
  assert.equal(
    formatState(kernel({ state: 'restoring', progress: 0.1 }), trans),
    'restoring 10%'
  );
  assert.equal(formatState(kernel({ state: 'suspended' }), trans), 'suspended');
  assert.equal(formatState(kernel({ state: 'parked' }), trans), 'parked');
  assert.equal(formatState(kernel({ state: 'failed' }), trans), 'failed');
});

test('formatGpus lists model and memory in use', () => {
  const gpu = {
    uuid: 'GPU-1',
    name: 'NVIDIA H100',
    memory_total: 80 * 1024 ** 3,
    memory_used: 12 * 1024 ** 3,
    utilization: 3
  };
  assert.equal(formatGpus([gpu], trans), 'NVIDIA H100 (12.0 GiB/80.0 GiB)');
  assert.equal(formatGpus([], trans), 'no GPU');
});

test('idle time and checkpoint age count up from what the server said', () => {
  const k = kernel({
    idle_seconds: 30,
    received_at: 1_000_000,
    last_checkpoint: { id: 'c', time: 900 }
  });
  assert.equal(idleSeconds(k, 1_060_000), 90);
  assert.equal(checkpointAge(k, 1_000_000), 100);
  assert.equal(checkpointAge(kernel(), 1_000_000), null);
  assert.equal(idleSeconds(kernel({ idle_seconds: null }), 0), null);
});

test('statusText says when a warned suspend falls due', () => {
  const now = 1_000_000;
  const warned = kernel({
    policy: {
      action: 'warn',
      reason: 'idle 28 min (timeout 30 min)',
      due_in: 120,
      for_demand: false,
      due_at: now + 120_000
    }
  });
  assert.equal(
    statusText(warned, now, trans),
    'running · no GPU · idle 30s · suspends in 2 min · no checkpoint'
  );
  // kept: no countdown, the reason is in the tooltip only
  assert.equal(
    statusText(
      kernel({
        policy: {
          action: null,
          reason: 'kept: exempt',
          due_in: null,
          for_demand: false
        }
      }),
      now,
      trans
    ),
    'running · no GPU · idle 30s · no checkpoint'
  );
});

test('statusText puts it together', () => {
  const now = 1_000_000;
  assert.equal(
    statusText(kernel(), now, trans),
    'running · no GPU · idle 30s · no checkpoint'
  );
  assert.equal(
    statusText(
      kernel({
        state: 'suspended',
        last_checkpoint: { id: 'c', time: now / 1000 - 300 }
      }),
      now,
      trans
    ),
    'suspended · checkpoint 5m ago'
  );
  assert.equal(
    statusText(kernel({ state: 'restoring', progress: 0.5 }), now, trans),
    'restoring 50% · no GPU · no checkpoint'
  );
});

/** A kernel whose last checkpoint is staged, with its write as given. */
function staged(write: IKernel['write_behind'] = null): IKernel {
  return kernel({
    state: 'suspended',
    last_checkpoint: { id: 'c1', time: 700, durability: 'staged' },
    write_behind: write
  });
}

test('durabilityText says where a staged checkpoint is, and nothing once durable', () => {
  assert.equal(durabilityText(staged(), trans), 'in host memory, writing');
  assert.equal(
    durabilityText(
      staged({ checkpoint_id: 'c1', bytes_done: 40, bytes_total: 100 }),
      trans
    ),
    'in host memory, writing 40%'
  );
  const failed = staged({
    checkpoint_id: 'c1',
    attempts: 2,
    error: 'disk full'
  });
  assert.equal(
    durabilityText(failed, trans),
    'write failed, retrying: disk full'
  );
  assert.ok(writeFailed(failed));
  assert.ok(!writeFailed(staged()));
  // the write of another (older) checkpoint is not the last one's
  assert.equal(
    durabilityText(
      staged({ checkpoint_id: 'c0', attempts: 1, error: 'x' }),
      trans
    ),
    'in host memory, writing'
  );
  const durable = kernel({
    last_checkpoint: { id: 'c1', time: 700, durability: 'durable' }
  });
  assert.equal(durabilityText(durable, trans), null);
  assert.equal(durabilityShortText(durable, trans), null);
  // servers without staged suspends say nothing of durability
  assert.equal(
    durabilityText(kernel({ last_checkpoint: { id: 'c1' } }), trans),
    null
  );
  assert.equal(durabilityText(kernel(), trans), null);
});

test('statusText: parked, and a staged checkpoint being saved', () => {
  const now = 1_000_000;
  assert.equal(
    statusText(
      staged({ checkpoint_id: 'c1', bytes_done: 40, bytes_total: 100 }),
      now,
      trans
    ),
    'suspended · saving 40% · checkpoint 5m ago'
  );
  assert.equal(
    statusText(staged(), now, trans),
    'suspended · saving · checkpoint 5m ago'
  );
  assert.equal(
    statusText(
      staged({ checkpoint_id: 'c1', attempts: 1, error: 'disk full' }),
      now,
      trans
    ),
    'suspended · write failed, retrying · checkpoint 5m ago'
  );
  assert.equal(
    statusText(
      kernel({
        state: 'parked',
        last_checkpoint: { id: 'c', time: 700, durability: 'durable' }
      }),
      now,
      trans
    ),
    'parked · checkpoint 5m ago'
  );
});

test('releasedText says how the GPUs were freed and where the state is', () => {
  const event: IGpuckptEvent = {
    event: 'suspend',
    kernel_id: 'k1',
    phase: 'done',
    checkpoint_id: 'c1',
    gpus_released: 1,
    bytes: 20 * 1024 ** 2,
    mode: 'suspend',
    durability: 'durable'
  };
  assert.equal(
    releasedText(event, 'a.ipynb', trans),
    'a.ipynb suspended: 1 GPU(s) released, 20.0 MiB saved. Run a cell to resume.'
  );
  assert.equal(
    releasedText({ ...event, durability: 'staged' }, 'a.ipynb', trans),
    'a.ipynb suspended: 1 GPU(s) released, 20.0 MiB in host memory, being written to the store. Run a cell to resume.'
  );
  assert.equal(
    releasedText({ ...event, mode: 'park' }, 'a.ipynb', trans),
    'a.ipynb parked: 1 GPU(s) released; the CUDA driver holds its GPU memory in host memory. Run a cell to resume.'
  );
  // a server without modes or durability: a suspend, saved
  assert.equal(
    releasedText(
      { event: 'suspend', kernel_id: 'k1', phase: 'done', bytes: 10 },
      'a.ipynb',
      trans
    ),
    'a.ipynb suspended: 0 GPU(s) released, 10 B saved. Run a cell to resume.'
  );
});

test('writeFailedText gives the reason and when the write is tried again', () => {
  const event: IGpuckptEvent = {
    event: 'suspend',
    kernel_id: 'k1',
    phase: 'write_failed',
    checkpoint_id: 'c1',
    error: 'No space left on device',
    retry_in: 30
  };
  assert.equal(
    writeFailedText(event, 'a.ipynb', trans),
    'a.ipynb: its checkpoint could not be written to the store (No space left on device); trying again in 30s. Its copy in host memory is kept meanwhile.'
  );
  assert.equal(
    writeFailedText({ ...event, retry_in: undefined }, 'a.ipynb', trans),
    'a.ipynb: its checkpoint could not be written to the store (No space left on device).'
  );
});

test('statusText says where a Slurm kernel runs, and why a resume waits', () => {
  const now = 1_000_000;
  const gpu = {
    uuid: 'g',
    name: 'GPU 0 of job 7',
    memory_total: 0,
    memory_used: 0,
    utilization: 0
  };
  assert.equal(
    statusText(
      kernel({ placement: 'slurm', node: 'node2', job_id: '7', gpus: [gpu] }),
      now,
      trans
    ),
    'running · 1 GPU(s) · on node2 (Slurm job 7) · idle 30s · no checkpoint'
  );
  const waiting = 'waiting for a GPU: queued in Slurm, job 8, reason Resources';
  assert.equal(
    statusText(
      kernel({
        state: 'restoring',
        placement: 'slurm',
        waiting_for_gpus: waiting
      }),
      now,
      trans
    ),
    `restoring · ${waiting} · no checkpoint`
  );
});

test('skippedText names the variables, reasons and cells to re-run', () => {
  assert.equal(skippedText([], trans), null);
  assert.equal(
    skippedText(
      [
        { name: 'sock', reason: 'cannot pickle socket', cells: [4, 2] },
        { name: 'gen', reason: 'generator', cells: [2] }
      ],
      trans
    ),
    'Not saved: sock (cannot pickle socket); gen (generator). Re-run cells 2, 4 to rebuild them.'
  );
  assert.equal(
    skippedText([{ name: 'x', reason: 'r' }], trans),
    'Not saved: x (r).'
  );
});

test('baseName keeps the file name of a notebook path', () => {
  assert.equal(baseName('work/deep/Untitled.ipynb'), 'Untitled.ipynb');
  assert.equal(baseName('Untitled.ipynb'), 'Untitled.ipynb');
  assert.equal(baseName('dir/'), 'dir');
});

test('outcomeText says what a no-op did, and nothing for actions that ran', () => {
  assert.equal(
    outcomeText('already running', 'a.ipynb', trans),
    'a.ipynb is already running: nothing to resume.'
  );
  assert.equal(
    outcomeText('already suspended', 'a.ipynb', trans),
    'a.ipynb is already suspended.'
  );
  assert.equal(
    outcomeText('already parked', 'a.ipynb', trans),
    'a.ipynb is already parked.'
  );
  assert.equal(outcomeText('done', 'a.ipynb', trans), null);
  assert.equal(outcomeText('started', 'a.ipynb', trans), null);
  assert.equal(outcomeText(undefined, 'a.ipynb', trans), null);
});

test('survivorsText lists the processes that outlived a suspend', () => {
  assert.equal(survivorsText(undefined, 'a.ipynb', trans), null);
  assert.equal(survivorsText([], 'a.ipynb', trans), null);
  assert.equal(
    survivorsText(['pid 12 (python)', 'pid 13 (nvidia-smi)'], 'a.ipynb', trans),
    'a.ipynb was suspended, but 2 process(es) outlived it and may still hold GPU memory, so its GPUs stay held: pid 12 (python), pid 13 (nvidia-smi).'
  );
});

test('notRestoredText names what a restore lost, could not set up or skipped, with why', () => {
  assert.equal(
    notRestoredText(
      {
        lost: [{ name: 'h', reason: 'failed to load' }],
        skipped: [{ name: 'g', reason: 'cannot pickle generator' }]
      },
      trans
    ),
    'h (failed to load); g (cannot pickle generator)'
  );
  assert.equal(
    notRestoredText(
      {
        lost: [],
        not_set_up: [
          { name: 'client', reason: 'the scheduler does not answer' }
        ],
        skipped: [{ name: 'g', reason: 'cannot pickle generator' }]
      },
      trans
    ),
    'client (the scheduler does not answer); g (cannot pickle generator)'
  );
  assert.equal(notRestoredText({ lost: [], skipped: [] }, trans), 'nothing');
});
