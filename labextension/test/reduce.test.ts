import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  applyEvent,
  canCheckpoint,
  canPark,
  canResume,
  canRebuild,
  canSuspend,
  markActivity,
  parseEvent,
  rebuildOffer,
  SCHEMA_PREFIX
} from '../src/reduce';
import { IGpuckptEvent, IKernel, IRestoreReport } from '../src/types';
import { kernelModel } from './fixtures';

const gpu = {
  uuid: 'GPU-1',
  name: 'A100',
  memory_total: 1,
  memory_used: 1,
  utilization: 0
};

function kernel(overrides: Partial<IKernel> = {}): IKernel {
  return kernelModel({ idle_seconds: 600, gpus: [gpu], ...overrides });
}

/** An event as the server's /api/events/subscribe sends it. */
function message(
  event: string,
  data: Record<string, unknown>
): Record<string, unknown> {
  return {
    schema_id: `${SCHEMA_PREFIX}${event}/v1`,
    __timestamp__: '2025-01-01T00:00:00Z',
    kernel_id: 'k1',
    ...data
  };
}

function reduce(
  k: IKernel | undefined,
  ...messages: Record<string, unknown>[]
): IKernel | undefined {
  for (const m of messages) {
    const event = parseEvent(m);
    assert.ok(event, `not parsed: ${JSON.stringify(m)}`);
    k = applyEvent(k, event as IGpuckptEvent, 5000);
  }
  return k;
}

test('parseEvent keeps only jupyter_gpuckpt events', () => {
  assert.equal(
    parseEvent({
      schema_id:
        'https://events.jupyter.org/jupyter_server/contents_service/v1',
      path: 'x'
    }),
    null
  );
  assert.equal(parseEvent(null), null);
  assert.equal(parseEvent(message('unknown', { phase: 'done' })), null);
  assert.equal(parseEvent(message('suspend', { phase: 'sideways' })), null);
  assert.deepEqual(
    parseEvent(
      message('restore-after-failure', { phase: 'done', lost_cells: [3, 4] })
    ),
    {
      event: 'restore-after-failure',
      kernel_id: 'k1',
      phase: 'done',
      lost_cells: [3, 4]
    }
  );
  // jupyter_events' own envelope names the schema __schema__
  assert.equal(
    parseEvent({
      __schema__: `${SCHEMA_PREFIX}resume/v1`,
      kernel_id: 'k',
      phase: 'started'
    })?.event,
    'resume'
  );
});

test('a suspend goes checkpointing with progress, then suspended without GPUs', () => {
  let k = reduce(
    kernel(),
    message('suspend', { phase: 'started', reason: 'request' })
  );
  assert.equal(k?.state, 'checkpointing');
  assert.equal(k?.progress, 0);
  k = reduce(
    k,
    message('suspend', { phase: 'progress', bytes_done: 25, bytes_total: 100 })
  );
  assert.equal(k?.progress, 0.25);
  k = reduce(
    k,
    message('suspend', {
      phase: 'done',
      checkpoint_id: 'c1',
      bytes: 100,
      gpus_released: 1
    })
  );
  assert.equal(k?.state, 'suspended');
  assert.equal(k?.progress, null);
  assert.deepEqual(k?.gpus, []);
  assert.equal(k?.last_checkpoint?.id, 'c1');
  assert.equal(k?.last_checkpoint?.time, 5);
  assert.ok(canResume(k) && !canSuspend(k) && !canCheckpoint(k));
});

test('parseEvent accepts the staged suspend and park phases', () => {
  for (const phase of ['released', 'writing', 'write_failed', 'durable']) {
    assert.equal(
      parseEvent(message('suspend', { phase, checkpoint_id: 'c1' }))?.phase,
      phase
    );
  }
  assert.deepEqual(
    parseEvent(
      message('suspend', {
        phase: 'released',
        checkpoint_id: 'c1',
        durability: 'staged',
        mode: 'suspend',
        gpus_released: 1,
        not_parked: 'no driver'
      })
    ),
    {
      event: 'suspend',
      kernel_id: 'k1',
      phase: 'released',
      checkpoint_id: 'c1',
      durability: 'staged',
      mode: 'suspend',
      gpus_released: 1,
      not_parked: 'no driver'
    }
  );
  assert.equal(
    parseEvent(
      message('resume', {
        phase: 'done',
        checkpoint_id: 'c1',
        source: 'host memory'
      })
    )?.source,
    'host memory'
  );
});

test('a staged suspend: released frees the GPUs, then writing, then durable', () => {
  let k = reduce(
    kernel({ last_checkpoint: { id: 'c0', time: 1, durability: 'durable' } }),
    message('suspend', { phase: 'started', reason: 'request' }),
    message('suspend', { phase: 'progress', bytes_done: 50, bytes_total: 100 })
  );
  k = reduce(
    k,
    message('suspend', {
      phase: 'released',
      checkpoint_id: 'c1',
      durability: 'staged',
      mode: 'suspend',
      gpus_released: 1,
      bytes: 100
    })
  );
  assert.equal(k?.state, 'suspended');
  assert.deepEqual(k?.gpus, []);
  assert.equal(k?.progress, null);
  assert.equal(k?.suspended_for, 0);
  assert.deepEqual(k?.last_checkpoint, {
    id: 'c1',
    time: 5,
    bytes_total: 100,
    durability: 'staged'
  });
  assert.ok(canResume(k) && !canSuspend(k) && !canPark(k));
  // `done` names the same checkpoint: it stays staged, and as old as it was
  k = applyEvent(
    k,
    parseEvent(
      message('suspend', {
        phase: 'done',
        checkpoint_id: 'c1',
        durability: 'staged',
        mode: 'suspend',
        bytes: 100,
        gpus_released: 1
      })
    ) as IGpuckptEvent,
    9000
  );
  assert.equal(k?.state, 'suspended');
  assert.equal(k?.last_checkpoint?.time, 5);
  assert.equal(k?.last_checkpoint?.durability, 'staged');
  k = reduce(
    k,
    message('suspend', {
      phase: 'writing',
      checkpoint_id: 'c1',
      bytes_done: 40,
      bytes_total: 100
    })
  );
  assert.equal(k?.state, 'suspended', 'writing does not change the state');
  assert.equal(k?.progress, null);
  assert.deepEqual(k?.write_behind, {
    checkpoint_id: 'c1',
    bytes_done: 40,
    bytes_total: 100
  });
  k = reduce(
    k,
    message('suspend', {
      phase: 'durable',
      checkpoint_id: 'c1',
      bytes_written: 100,
      seconds: 2
    })
  );
  assert.equal(k?.state, 'suspended');
  assert.equal(k?.write_behind, null);
  assert.equal(k?.last_checkpoint?.durability, 'durable');
  assert.equal(k?.last_checkpoint?.bytes_total, 100);
});

test('a failed write keeps the error and counts attempts; a lost copy clears it', () => {
  const staged = kernel({
    state: 'suspended',
    gpus: [],
    last_checkpoint: { id: 'c1', time: 1, durability: 'staged' }
  });
  const failure = (error: string) =>
    message('suspend', {
      phase: 'write_failed',
      checkpoint_id: 'c1',
      error,
      retry_in: 1
    });
  let k = reduce(staged, failure('disk full'));
  assert.deepEqual(k?.write_behind, {
    checkpoint_id: 'c1',
    attempts: 1,
    error: 'disk full'
  });
  k = reduce(k, failure('store gone'));
  assert.equal(k?.write_behind?.attempts, 2);
  assert.equal(k?.write_behind?.error, 'store gone');
  assert.equal(k?.state, 'suspended');
  assert.equal(k?.last_error, null, 'the kernel itself did not fail');
  // a write that goes on after a failure shows progress again
  k = reduce(
    k,
    message('suspend', {
      phase: 'writing',
      checkpoint_id: 'c1',
      bytes_done: 1,
      bytes_total: 2
    })
  );
  assert.equal(k?.write_behind?.error, undefined);
  // not retried (no retry_in): the staged copy is lost, the fetch tells the rest
  k = reduce(
    k,
    message('suspend', {
      phase: 'write_failed',
      checkpoint_id: 'c1',
      error: 'lost'
    })
  );
  assert.equal(k?.write_behind, null);
  // durable for another checkpoint leaves the last one as it is
  const other = reduce(
    staged,
    message('suspend', { phase: 'durable', checkpoint_id: 'c0' })
  );
  assert.equal(other?.last_checkpoint?.durability, 'staged');
});

test('a park goes parked without GPUs, then resumes from the parked process', () => {
  let k = reduce(
    kernel(),
    message('suspend', { phase: 'started', reason: 'request' }),
    message('suspend', {
      phase: 'released',
      checkpoint_id: 'c1',
      durability: 'durable',
      mode: 'park',
      gpus_released: 1,
      bytes: 10
    }),
    message('suspend', {
      phase: 'done',
      checkpoint_id: 'c1',
      durability: 'durable',
      mode: 'park',
      gpus_released: 1,
      bytes: 10
    })
  );
  assert.equal(k?.state, 'parked');
  assert.deepEqual(k?.gpus, []);
  assert.equal(k?.parked_for, 0);
  assert.equal(k?.suspended_for, null);
  assert.ok(canResume(k) && !canSuspend(k) && !canPark(k) && !canCheckpoint(k));
  k = reduce(k, message('suspend', { phase: 'durable', checkpoint_id: 'c1' }));
  assert.equal(k?.state, 'parked');
  k = reduce(
    k,
    message('resume', { phase: 'started', reason: 'execute' }),
    message('resume', { phase: 'done', checkpoint_id: 'c1', source: 'park' })
  );
  assert.equal(k?.state, 'running');
  assert.equal(k?.parked_for, null);
  assert.equal(k?.idle_seconds, 0);
  assert.ok(canSuspend(k) && canPark(k));
});

test('a failed unpark leaves the kernel parked; a failed restore suspended', () => {
  const parked = kernel({ state: 'parked', gpus: [], parked_for: 60 });
  const failed = reduce(
    parked,
    message('resume', { phase: 'started' }),
    message('resume', { phase: 'failed', error: 'GPU busy' })
  );
  assert.equal(failed?.state, 'parked');
  assert.equal(failed?.last_error, 'GPU busy');
  const suspended = reduce(
    kernel({ state: 'suspended', gpus: [], parked_for: null }),
    message('resume', { phase: 'started' }),
    message('resume', { phase: 'failed', error: 'no GPU' })
  );
  assert.equal(suspended?.state, 'suspended');
});

test('a parked kernel whose process the server ended is suspended, for as long', () => {
  const parked = kernel({
    state: 'parked',
    gpus: [],
    parked_for: 3600,
    received_at: 0,
    last_checkpoint: { id: 'c1', time: 1, bytes_total: 10 }
  });
  const k = reduce(
    parked,
    message('suspend', {
      phase: 'released',
      reason: 'policy',
      checkpoint_id: 'c1',
      durability: 'durable',
      mode: 'suspend',
      gpus_released: 0
    })
  );
  assert.equal(k?.state, 'suspended');
  assert.equal(k?.suspended_for, 3605, 'parked 3600 s, plus 5 s since');
  assert.equal(k?.parked_for, null);
  assert.equal(k?.received_at, 5000);
  assert.equal(k?.last_checkpoint?.time, 1, 'the same checkpoint');
  assert.equal(k?.last_checkpoint?.bytes_total, 10);
});

test('a suspend from a server without `released` or `mode` still ends suspended', () => {
  const k = reduce(
    kernel(),
    message('suspend', { phase: 'started' }),
    message('suspend', { phase: 'done', checkpoint_id: 'c1', bytes: 1 })
  );
  assert.equal(k?.state, 'suspended');
  assert.equal(k?.last_checkpoint?.durability, undefined);
});

test('a failed suspend goes back to running with the error', () => {
  const k = reduce(
    kernel(),
    message('suspend', { phase: 'started' }),
    message('suspend', { phase: 'failed', error: 'disk full' })
  );
  assert.equal(k?.state, 'running');
  assert.equal(k?.last_error, 'disk full');
  assert.ok(canSuspend(k));
});

test('a resume (also by running a cell) goes restoring, then running and not idle', () => {
  const suspended = kernel({ state: 'suspended', gpus: [] });
  let k = reduce(
    suspended,
    message('resume', { phase: 'started', reason: 'execute' })
  );
  assert.equal(k?.state, 'restoring');
  assert.ok(!canResume(k) && !canSuspend(k));
  k = reduce(k, message('resume', { phase: 'done', checkpoint_id: 'c1' }));
  assert.equal(k?.state, 'running');
  assert.equal(k?.idle_seconds, 0);
  const failed = reduce(
    suspended,
    message('resume', { phase: 'started' }),
    message('resume', { phase: 'failed', error: 'no GPU' })
  );
  assert.equal(failed?.state, 'suspended');
  assert.equal(failed?.last_error, 'no GPU');
});

test('a checkpoint keeps the kernel running and shows progress', () => {
  let k = reduce(
    kernel(),
    message('checkpoint', { phase: 'started', reason: 'periodic' })
  );
  assert.equal(k?.state, 'running');
  assert.equal(k?.progress, 0);
  assert.ok(!canSuspend(k), 'no suspend while a checkpoint is written');
  k = reduce(
    k,
    message('checkpoint', { phase: 'progress', bytes_done: 3, bytes_total: 4 })
  );
  assert.equal(k?.progress, 0.75);
  k = reduce(
    k,
    message('checkpoint', { phase: 'done', checkpoint_id: 'c2', bytes: 4 })
  );
  assert.equal(k?.progress, null);
  assert.equal(k?.last_checkpoint?.id, 'c2');
  assert.equal(k?.last_checkpoint?.bytes_total, 4);
});

test('restore after failure goes restoring, then running', () => {
  let k = reduce(
    kernel(),
    message('restore-after-failure', { phase: 'started' })
  );
  assert.equal(k?.state, 'restoring');
  k = reduce(
    k,
    message('restore-after-failure', {
      phase: 'done',
      checkpoint_id: 'c1',
      lost_cells: [5]
    })
  );
  assert.equal(k?.state, 'running');
});

test('events for other or unknown kernels change nothing', () => {
  const k = kernel({ id: 'other' });
  assert.equal(reduce(k, message('suspend', { phase: 'started' })), k);
  assert.equal(
    reduce(undefined, message('suspend', { phase: 'started' })),
    undefined
  );
});

test('a kernel that is not suspendable offers checkpoint only', () => {
  const k = kernel({ suspendable: false });
  assert.ok(!canSuspend(k) && !canPark(k) && canCheckpoint(k) && !canResume(k));
});

test('park applies where suspend does: a running, idle, suspendable kernel', () => {
  assert.ok(canPark(kernel()));
  assert.ok(!canPark(kernel({ progress: 0.5 })));
  assert.ok(!canPark(kernel({ state: 'parked' })));
  assert.ok(!canPark(kernel({ state: 'suspended' })));
  assert.ok(!canPark(undefined));
  assert.ok(canResume(kernel({ state: 'parked' })));
  assert.ok(!canResume(kernel({ state: 'restoring' })));
});

test('a new operation clears the last notice, a periodic checkpoint does not', () => {
  const noticed = kernel({ notice: 'Re-ran cell 2: g is back.' });
  const suspending = reduce(
    noticed,
    message('suspend', { phase: 'started', reason: 'request' })
  );
  assert.equal(suspending?.notice, null);
  const resuming = reduce(
    kernel({ state: 'suspended', notice: 'old' }),
    message('resume', { phase: 'started', reason: 'execute' })
  );
  assert.equal(resuming?.notice, null);
  const periodic = reduce(
    noticed,
    message('checkpoint', { phase: 'started', reason: 'periodic' })
  );
  assert.equal(periodic?.notice, 'Re-ran cell 2: g is back.');
});

test('activity in the notebook restarts the idle time without the server', () => {
  const k = kernel({ idle_seconds: 600, received_at: 0 });
  const active = markActivity(k, 42_000);
  assert.equal(active?.idle_seconds, 0);
  assert.equal(active?.received_at, 42_000);
  assert.equal(k.idle_seconds, 600, 'the kernel given is not changed');
  assert.equal(markActivity(undefined, 1), undefined);
  // the server's own calls during a checkpoint or restore are not the user's activity
  const busy = kernel({ progress: 0.5 });
  assert.equal(markActivity(busy, 1), busy);
  const suspended = kernel({ state: 'suspended' });
  assert.equal(markActivity(suspended, 1), suspended);
});

test('activity voids a suspend the policy warned of, and keeps why a kernel is kept', () => {
  const warned = kernel({
    policy: {
      action: 'warn',
      reason: 'idle 28 min',
      due_in: 120,
      for_demand: false
    }
  });
  assert.equal(markActivity(warned, 1)?.policy, null);
  const floor = {
    action: null,
    reason: 'kept: group floor (research keeps 2 GPU(s))',
    due_in: null,
    for_demand: false
  };
  assert.equal(markActivity(kernel({ policy: floor }), 1)?.policy, floor);
  assert.equal(markActivity(kernel(), 1)?.policy, undefined);
});

function report(overrides: Partial<IRestoreReport> = {}): IRestoreReport {
  return {
    id: 'c1',
    restored: ['x'],
    nbytes: 10,
    skipped: [{ name: 'g', type: 'generator', reason: 'cannot pickle' }],
    lost: [],
    warnings: [],
    seconds: 0.5,
    cells_to_rerun: [2],
    text: 'Restored 1 variable(s)',
    ...overrides
  };
}

test('a rebuild is offered while the report names cells and none ran since', () => {
  assert.equal(rebuildOffer(kernel()), null, 'no report, no offer');
  assert.equal(rebuildOffer(kernel({ report: null })), null);
  const offered = kernel({ report: report(), rebuild_skipped: 'ask' });
  assert.equal(rebuildOffer(offered), 'ask');
  assert.ok(canRebuild(offered));
  // a kernel from a server that does not say its setting is asked too
  assert.equal(rebuildOffer(kernel({ report: report() })), 'ask');
  assert.equal(
    rebuildOffer(kernel({ report: report({ cells_to_rerun: [] }) })),
    null,
    'nothing to re-run'
  );
  assert.equal(
    rebuildOffer(kernel({ report: report(), rebuild_skipped: 'never' })),
    null
  );
  const automatic = kernel({ report: report(), rebuild_skipped: 'always' });
  assert.equal(rebuildOffer(automatic), 'always');
  assert.ok(!canRebuild(automatic), 'the server rebuilds: no second run');
  const rebuilt = report({
    rebuilt: { cells: [2], names: ['g'], missing: [], failed: null, text: 'ok' }
  });
  assert.equal(rebuildOffer(kernel({ report: rebuilt })), null);
  assert.ok(
    !canRebuild(kernel({ report: report(), state: 'suspended', gpus: [] })),
    'a suspended kernel cannot run cells'
  );
  assert.ok(!canRebuild(kernel({ report: report(), progress: 0.5 })));
});
