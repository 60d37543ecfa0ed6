/**
 * What the panel shows of a kernel and of a GPU, as plain strings and flags. The DOM
 * (card.ts, panel.ts) compares these with what it shows and changes only what differs;
 * nothing here touches the DOM, so the unit tests run it under plain node.
 */
import {
  baseName,
  checkpointAge,
  durabilityText,
  formatBytes,
  formatDuration,
  formatGpu,
  formatPlace,
  formatState,
  idleSeconds,
  notRestoredText,
  writeFailed
} from './format';
import { canKeep, policyView } from './policy';
import {
  canCheckpoint,
  canPark,
  canRebuild,
  canResume,
  canSuspend,
  rebuildOffer
} from './reduce';
import { IGPU, IKernel, ITrans, KernelState } from './types';

/** The last restore's report, as a card shows it. */
export interface IReportView {
  /** `offer`: what was not restored (with a Rebuild button for `ask`); `rebuilt`: what a rebuild did. */
  kind: 'offer' | 'rebuilt';
  text: string;
  /** `ask`: the user rebuilds with the button; `always`: the server does it. */
  offer: 'ask' | 'always' | null;
  /** The rebuild stopped at a failing cell. */
  failed: boolean;
}

/** One kernel's card. */
export interface IKernelCardView {
  /** The notebook's file name, or `kernel 1234abcd`. */
  name: string;
  /** The tooltip of the name: the full path and the kernel id. */
  title: string;
  state: KernelState;
  /** The badge: `running`, `checkpointing 40%`, `suspended`, `parked`... */
  stateLabel: string;
  /** A checkpoint or restore is under way. */
  busy: boolean;
  /** One line per GPU, or one line saying there is none. */
  gpus: string[];
  /** `idle 5m`, `suspended for 2h` or `parked for 3m`; null when none applies. */
  idle: string | null;
  /**
   * `checkpoint 3m ago · 3.7 KiB` or `no checkpoint`, with `· in host memory, writing 40%`
   * while the checkpoint is staged, or why its write failed.
   */
  checkpoint: string;
  /** The write of the staged checkpoint to the store failed (it is retried). */
  writeFailed: boolean;
  /** The server's `waiting for 1 GPU(s); 0 free`, while a resume waits. */
  waiting: string | null;
  error: string | null;
  /** The server's notice, unless the report block already says the same. */
  notice: string | null;
  /** Why the policy keeps a running kernel: `Policy: kept: group floor (...)`; else null. */
  policy: string | null;
  /**
   * A suspend the policy warned of: `Suspends in 2 min: idle 28 min (timeout 30 min)`,
   * with a Keep running button; else null.
   */
  warning: string | null;
  report: IReportView | null;
  suspendable: boolean;
  can: {
    checkpoint: boolean;
    suspend: boolean;
    park: boolean;
    resume: boolean;
    rebuild: boolean;
    keep: boolean;
  };
}

/** One GPU of the server in the panel's list. */
export interface IGpuView {
  /** `0 · NVIDIA A100` */
  name: string;
  /** `12.0 GiB / 80.0 GiB · 35% · Untitled.ipynb` */
  detail: string;
  title: string;
  free: boolean;
}

function reportView(kernel: IKernel, trans: ITrans): IReportView | null {
  const report = kernel.report;
  if (!report) {
    return null;
  }
  if (report.rebuilt) {
    return {
      kind: 'rebuilt',
      text: report.rebuilt.text,
      offer: null,
      failed: !!report.rebuilt.failed
    };
  }
  const offer = rebuildOffer(kernel);
  if (!offer) {
    return null;
  }
  const names = notRestoredText(report, trans);
  const cells = report.cells_to_rerun.join(', ');
  const one = report.cells_to_rerun.length === 1;
  let text: string;
  if (offer === 'ask') {
    text = one
      ? trans.__('Not restored: %1. Rebuild re-runs cell %2.', names, cells)
      : trans.__('Not restored: %1. Rebuild re-runs cells %2.', names, cells);
  } else {
    text = one
      ? trans.__(
          'Not restored: %1. The server re-runs cell %2 to rebuild it.',
          names,
          cells
        )
      : trans.__(
          'Not restored: %1. The server re-runs cells %2 to rebuild them.',
          names,
          cells
        );
  }
  return { kind: 'offer', text, offer, failed: false };
}

/**
 * What a kernel's card shows at `now` (ms).
 *
 * @param path the notebook's path, if a session of this browser knows it
 */
export function kernelCardView(
  kernel: IKernel,
  path: string | null,
  now: number,
  trans: ITrans
): IKernelCardView {
  const name = path
    ? baseName(path)
    : trans.__('kernel %1', kernel.id.slice(0, 8));
  const title = path
    ? trans.__('%1 (kernel %2)', path, kernel.id)
    : trans.__('kernel %1', kernel.id);

  let gpus: string[];
  if (kernel.state === 'suspended') {
    gpus = [trans.__('GPUs released')];
  } else if (kernel.state === 'parked') {
    gpus = [trans.__('GPUs released; their memory is parked in host memory')];
  } else if (!kernel.gpus.length) {
    gpus = [trans.__('no GPU')];
  } else if (kernel.placement === 'slurm') {
    gpus = [
      trans.__('%1 GPU(s) %2', kernel.gpus.length, formatPlace(kernel, trans))
    ];
  } else {
    gpus = kernel.gpus.map(g =>
      g.index === undefined
        ? formatGpu(g)
        : trans.__('GPU %1: %2', g.index, formatGpu(g))
    );
  }

  let idle: string | null = null;
  const since =
    kernel.received_at === undefined
      ? 0
      : Math.max(0, (now - kernel.received_at) / 1000);
  if (
    kernel.state === 'suspended' &&
    typeof kernel.suspended_for === 'number'
  ) {
    idle = trans.__(
      'suspended for %1',
      formatDuration(kernel.suspended_for + since)
    );
  } else if (
    kernel.state === 'parked' &&
    typeof kernel.parked_for === 'number'
  ) {
    idle = trans.__('parked for %1', formatDuration(kernel.parked_for + since));
  } else if (kernel.state === 'running' && kernel.progress === null) {
    const seconds = idleSeconds(kernel, now);
    idle =
      seconds === null ? null : trans.__('idle %1', formatDuration(seconds));
  }

  const last = kernel.last_checkpoint;
  let checkpoint = last
    ? trans.__(
        'checkpoint %1 ago · %2',
        formatDuration(checkpointAge(kernel, now)),
        formatBytes(last.bytes_total)
      )
    : trans.__('no checkpoint');
  const durability = durabilityText(kernel, trans);
  if (durability) {
    checkpoint = `${checkpoint} · ${durability}`;
  }

  const policy = policyView(kernel, now, trans);
  const report = reportView(kernel, trans);
  const notice =
    kernel.notice && !(report && report.text === kernel.notice)
      ? kernel.notice
      : null;
  return {
    name,
    title,
    state: kernel.state,
    stateLabel: formatState(kernel, trans),
    busy:
      kernel.progress !== null ||
      kernel.state === 'checkpointing' ||
      kernel.state === 'restoring',
    gpus,
    idle,
    checkpoint,
    writeFailed: writeFailed(kernel),
    waiting: kernel.waiting_for_gpus || null,
    error: kernel.last_error || null,
    notice,
    policy: policy.line,
    warning: policy.warning,
    report,
    suspendable: kernel.suspendable,
    can: {
      checkpoint: canCheckpoint(kernel),
      suspend: canSuspend(kernel),
      park: canPark(kernel),
      resume: canResume(kernel),
      rebuild: canRebuild(kernel),
      keep: canKeep(kernel)
    }
  };
}

/**
 * A GPU of the server in the panel's list.
 *
 * @param holder the name of the notebook (or kernel) holding it, null when free
 */
export function gpuView(
  gpu: IGPU,
  holder: string | null,
  trans: ITrans
): IGpuView {
  const name =
    gpu.index === undefined ? gpu.name : `${gpu.index} · ${gpu.name}`;
  const parts = [
    `${formatBytes(gpu.memory_used)} / ${formatBytes(gpu.memory_total)}`,
    `${gpu.utilization}%`,
    holder ?? trans.__('free')
  ];
  return {
    name,
    detail: parts.join(' · '),
    title: gpu.uuid,
    free: holder === null
  };
}
