import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  applyPolicyEvent,
  canKeep,
  dueIn,
  dueText,
  formatDue,
  isWarned,
  parsePolicyEvent,
  POLICY_SCHEMA,
  policyReason,
  policyView,
  stampPolicy,
  warningText
} from '../src/policy';
import { parseEvent } from '../src/reduce';
import { IKernel, IPolicyDecision } from '../src/types';
import { kernelModel, trans } from './fixtures';

const NOW = 1_000_000;

function kernel(overrides: Partial<IKernel> = {}): IKernel {
  return kernelModel({ idle_seconds: 1680, received_at: NOW, ...overrides });
}

function decision(overrides: Partial<IPolicyDecision> = {}): IPolicyDecision {
  return {
    action: null,
    reason: 'kept: group floor (research keeps 2 GPU(s))',
    due_in: null,
    for_demand: false,
    ...overrides
  };
}

/** A policy event as the server's /api/events/subscribe sends it. */
function message(data: Record<string, unknown>): Record<string, unknown> {
  return {
    schema_id: `${POLICY_SCHEMA}v1`,
    __timestamp__: '2025-01-01T00:00:00Z',
    kernel_id: 'k1',
    reason: 'idle 28 min (timeout 30 min)',
    due_in: null,
    for_demand: false,
    ...data
  };
}

test('parsePolicyEvent takes the policy events and nothing else', () => {
  assert.deepEqual(parsePolicyEvent(message({ action: 'warn', due_in: 120 })), {
    kernel_id: 'k1',
    action: 'warn',
    reason: 'idle 28 min (timeout 30 min)',
    due_in: 120,
    for_demand: false
  });
  const kept = parsePolicyEvent({
    __schema__: `${POLICY_SCHEMA}v1`,
    kernel_id: 'k1',
    action: 'kept',
    reason: 'the user chose Keep running'
  });
  assert.equal(kept?.action, 'kept');
  assert.equal(kept?.due_in, null);
  assert.equal(kept?.for_demand, false);
  assert.equal(
    parsePolicyEvent(message({ action: 'suspend', for_demand: true }))
      ?.for_demand,
    true
  );
  // not a policy event, or not one this code knows
  assert.equal(parsePolicyEvent(message({ action: 'convert' })), null);
  assert.equal(
    parsePolicyEvent(message({ action: 'warn', kernel_id: 3 })),
    null
  );
  assert.equal(
    parsePolicyEvent({
      schema_id: 'https://events.jupyter.org/jupyter_gpuckpt/suspend/v1',
      kernel_id: 'k1',
      phase: 'done'
    }),
    null
  );
  assert.equal(parsePolicyEvent(null), null);
  // and the operations' parser leaves policy events alone
  assert.equal(parseEvent(message({ action: 'warn', phase: 'done' })), null);
});

test('isWarned: the warning pass, and the passes after it until the suspend', () => {
  assert.equal(isWarned(decision({ action: 'warn', due_in: 120 })), true);
  assert.equal(
    isWarned(
      decision({
        reason: 'warned: suspend in 90 s; idle 29 min (timeout 30 min)',
        due_in: 90
      })
    ),
    true
  );
  assert.equal(isWarned(decision()), false);
  assert.equal(isWarned(decision({ action: 'suspend' })), false);
  assert.equal(isWarned(null), false);
  assert.equal(isWarned(undefined), false);
});

test('a warning counts down from when it came, on the browser clock', () => {
  const warned = applyPolicyEvent(
    kernel(),
    {
      kernel_id: 'k1',
      action: 'warn',
      reason: 'idle 28 min (timeout 30 min)',
      due_in: 120,
      for_demand: false
    },
    NOW
  );
  assert.equal(warned?.policy?.action, 'warn');
  assert.equal(warned?.policy?.due_at, NOW + 120_000);
  assert.equal(dueIn(warned, NOW + 30_000), 90);
  assert.equal(dueIn(warned, NOW + 200_000), 0);
  // the kernel's idle time is left alone: only the user's activity restarts it
  assert.equal(warned?.idle_seconds, 1680);
  assert.equal(warned?.received_at, NOW);
  // not running any more: nothing is due
  assert.equal(dueIn({ ...warned!, state: 'suspended' }, NOW), null);
  assert.equal(dueIn(kernel({ policy: decision() }), NOW), null);
  assert.equal(dueIn(undefined, NOW), null);
});

test('a fetched warning without a due time counts from when it was fetched', () => {
  const k = kernel({ policy: decision({ action: 'warn', due_in: 60 }) });
  assert.equal(dueIn(k, NOW + 10_000), 50);
});

test('stampPolicy keeps the due time of a decision that did not change', () => {
  const fetched = kernel({
    policy: decision({ action: 'warn', reason: 'idle 28 min', due_in: 120 })
  });
  const first = stampPolicy(fetched, undefined, NOW);
  assert.equal(first.policy?.due_at, NOW + 120_000);
  assert.notEqual(first, fetched);
  // fetched again 30 s later, the same decision: still due at the same time
  const again = stampPolicy({ ...fetched }, first, NOW + 30_000);
  assert.equal(again.policy?.due_at, NOW + 120_000);
  // the next pass counted down: due from now
  const next = stampPolicy(
    kernel({
      policy: decision({
        reason: 'warned: suspend in 80 s; idle 29 min',
        due_in: 80
      })
    }),
    again,
    NOW + 40_000
  );
  assert.equal(next.policy?.due_at, NOW + 120_000);
  // no due time: the kernel as it is
  const kept = kernel({ policy: decision() });
  assert.equal(stampPolicy(kept, first, NOW), kept);
});

test('a policy event changes only its kernel; kept restarts the idle time', () => {
  const k = kernel({ policy: decision({ action: 'warn', due_in: 60 }) });
  const event = {
    kernel_id: 'k1',
    action: 'kept' as const,
    reason: 'the user chose Keep running',
    due_in: null,
    for_demand: false
  };
  const kept = applyPolicyEvent(k, event, NOW + 5000);
  assert.deepEqual(kept?.policy, {
    action: null,
    reason: 'kept: the user chose Keep running',
    due_in: null,
    for_demand: false
  });
  assert.equal(kept?.idle_seconds, 0);
  assert.equal(kept?.received_at, NOW + 5000);
  assert.equal(k.policy?.action, 'warn', 'the kernel given is not changed');
  assert.equal(applyPolicyEvent(undefined, event), undefined);
  const other = kernel({ id: 'k2' });
  assert.equal(applyPolicyEvent(other, event), other);
  const suspend = applyPolicyEvent(
    k,
    { ...event, action: 'suspend', reason: 'idle 30 min (timeout 30 min)' },
    NOW
  );
  assert.equal(suspend?.policy?.action, 'suspend');
  assert.equal(dueIn(suspend, NOW), null);
});

test('formatDue writes durations as the server does, counting up', () => {
  assert.equal(formatDue(0), '0 s');
  assert.equal(formatDue(41.2), '42 s');
  assert.equal(formatDue(89), '89 s');
  assert.equal(formatDue(120), '2 min');
  assert.equal(formatDue(45 * 60), '45 min');
  assert.equal(formatDue(2 * 3600), '2.0 h');
  assert.equal(formatDue(-3), '0 s');
  assert.equal(dueText(120, trans), 'suspends in 2 min');
  assert.equal(dueText(0.4, trans), 'suspends now');
});

test('warningText: the notebook, when, and why', () => {
  assert.equal(
    warningText('Untitled.ipynb', 120, 'idle 28 min (timeout 30 min)', trans),
    'Untitled.ipynb: the kernel will be suspended in 2 min (idle 28 min, timeout 30 min)'
  );
  assert.equal(
    warningText('a.ipynb', 45, 'idle 12 min, 2 waiting for GPUs', trans),
    'a.ipynb: the kernel will be suspended in 45 s (idle 12 min, 2 waiting for GPUs)'
  );
  assert.equal(
    warningText('a.ipynb', 0, 'idle 30 min (timeout 30 min)', trans),
    'a.ipynb: the kernel will be suspended now (idle 30 min, timeout 30 min)'
  );
  assert.equal(
    warningText('a.ipynb', 60, '', trans),
    'a.ipynb: the kernel will be suspended in 60 s'
  );
});

test('policyReason drops the countdown the server puts before a warned reason', () => {
  assert.equal(
    policyReason(
      decision({
        reason: 'warned: suspend in 2 min; idle 28 min (timeout 30 min)',
        due_in: 120
      })
    ),
    'idle 28 min (timeout 30 min)'
  );
  assert.equal(
    policyReason(decision()),
    'kept: group floor (research keeps 2 GPU(s))'
  );
});

test('policyView: why a running kernel is kept', () => {
  assert.deepEqual(policyView(kernel({ policy: decision() }), NOW, trans), {
    line: 'Policy: kept: group floor (research keeps 2 GPU(s))',
    warning: null,
    due: null
  });
  assert.equal(
    policyView(
      kernel({
        policy: decision({
          reason: 'kept: idle 3 min of 30 min (timeout 30 min)'
        })
      }),
      NOW,
      trans
    ).line,
    'Policy: kept: idle 3 min of 30 min (timeout 30 min)'
  );
  // nothing to say: no decision yet, an action under way, another state, no reason
  const none = { line: null, warning: null, due: null };
  assert.deepEqual(policyView(kernel(), NOW, trans), none);
  assert.deepEqual(policyView(kernel({ policy: null }), NOW, trans), none);
  assert.deepEqual(
    policyView(
      kernel({
        policy: decision({
          action: 'checkpoint',
          reason: 'periodic checkpoint'
        })
      }),
      NOW,
      trans
    ),
    none
  );
  assert.deepEqual(
    policyView(kernel({ state: 'suspended', policy: decision() }), NOW, trans),
    none
  );
  assert.deepEqual(
    policyView(kernel({ progress: 0.3, policy: decision() }), NOW, trans),
    none
  );
  assert.deepEqual(
    policyView(kernel({ policy: decision({ reason: '' }) }), NOW, trans),
    none
  );
});

test('policyView: a warned kernel says when it is suspended, and why', () => {
  const warned = kernel({
    policy: decision({
      action: 'warn',
      reason: 'idle 28 min (timeout 30 min)',
      due_in: 120,
      due_at: NOW + 120_000
    })
  });
  assert.deepEqual(policyView(warned, NOW, trans), {
    line: null,
    warning: 'Suspends in 2 min: idle 28 min (timeout 30 min)',
    due: 'suspends in 2 min'
  });
  assert.equal(
    policyView(warned, NOW + 75_000, trans).warning,
    'Suspends in 45 s: idle 28 min (timeout 30 min)'
  );
  assert.equal(
    policyView(warned, NOW + 130_000, trans).warning,
    'Suspends now: idle 28 min (timeout 30 min)'
  );
  // a later pass: the server's own countdown is left out of the reason
  const later = kernel({
    policy: decision({
      reason: 'warned: suspend in 1 min; idle 29 min, 2 waiting for GPUs',
      due_in: 60,
      for_demand: true
    })
  });
  assert.equal(
    policyView(later, NOW, trans).warning,
    'Suspends in 60 s: idle 29 min, 2 waiting for GPUs'
  );
});

test('canKeep: a running checkpointable kernel', () => {
  assert.equal(canKeep(kernel()), true);
  assert.equal(canKeep(kernel({ state: 'suspended' })), false);
  assert.equal(canKeep(kernel({ suspendable: false })), false);
  assert.equal(canKeep(undefined), false);
});
