/**
 * The shapes the server extension's REST API and events use (see the README's REST table
 * and jupyter_gpuckpt/event_schemas). Nothing here imports JupyterLab, so the pure logic
 * (format.ts, reduce.ts) runs under plain node in the unit tests.
 */

/**
 * A kernel's lifecycle state, as `GET /api/gpuckpt/kernels` reports it. `suspended`: its
 * process ended after a checkpoint; `parked`: its process lives on, its GPU memory moved
 * into host memory by the CUDA driver. Both hold no GPU.
 */
export type KernelState =
  'running' | 'checkpointing' | 'suspended' | 'parked' | 'restoring' | 'failed';

/** How a suspend freed the GPUs: the process parked by the CUDA driver, or ended. */
export type ReleaseMode = 'park' | 'suspend';

/**
 * Where a checkpoint is: `staged` in host memory only (lost if the node dies) while the
 * server writes it to the store, or `durable` in the store.
 */
export type Durability = 'staged' | 'durable';

/** Where a resume read the state from. */
export type RestoreSource = 'host memory' | 'store' | 'park';

/** A GPU, held by a kernel or listed by `GET /api/gpuckpt/gpus`. */
export interface IGPU {
  uuid: string;
  name: string;
  index?: number;
  memory_total: number;
  memory_used: number;
  utilization: number;
  /** The kernel holding it (`/gpus` only). */
  kernel_id?: string | null;
}

/** A variable a checkpoint could not save. */
export interface ISkippedVariable {
  name: string;
  type?: string;
  reason: string;
  cells?: number[];
}

/** What a rebuild (`POST .../rebuild`) re-ran and what it got back. */
export interface IRebuilt {
  cells: number[];
  names: string[];
  /** Names that the cells that ran did not define again. */
  missing: string[];
  failed: { cell: number; error: string } | null;
  /** Only planned (`dry_run`): nothing ran. */
  dry_run?: boolean;
  plan?: IRebuildPlan | null;
  /** Restored names a cell assigned again, given their restored objects back, with the cell. */
  discarded?: Record<string, number>;
  /** Those that keep what the cell assigned instead (`?keep=1`). */
  kept?: Record<string, number>;
  /** Names the cells made that the checkpoint did not have, removed again. */
  removed?: string[];
  /** The cells moved the random number generators, which were put back. */
  rng_restored?: boolean;
  warnings?: string[];
  text: string;
}

/** One cell of a rebuild plan: what it rebuilds and what running it does besides. */
export interface IPlannedCell {
  cell: number;
  rebuilds: string[];
  /** Names it makes only for the cells after it, removed afterwards. */
  feeds: string[];
  /** Restored names it assigns again. */
  reassigns: string[];
  made_from: Record<string, string[]>;
  /** Effects beyond its names: `rng`, `files`, `network`, `processes` or `in_place`. */
  effects: { kind: string; what: string }[];
  unbound: string[];
}

/** The fewest recorded cells that rebuild what the last restore left out, told before they run. */
export interface IRebuildPlan {
  names: string[];
  cells: IPlannedCell[];
  needs: Record<string, number[]>;
  unresolved: string[];
}

/** What the last restore brought back, what it did not and why, which cells rebuild it. */
export interface IRestoreReport {
  id: string;
  restored: string[];
  nbytes: number;
  skipped: ISkippedVariable[];
  lost: ISkippedVariable[];
  /** Restored with a live part that could not start again: not in the namespace (older kernels: absent). */
  not_set_up?: ISkippedVariable[];
  /** Restored, with a live part started again (a pool's workers, a cluster): the text's "rebuilt". */
  started_again?: string[];
  /** How many of each kind the text names. */
  counts?: { restored: number; rebuilt: number; not_restored: number };
  warnings: string[];
  seconds: number;
  cells_to_rerun: number[];
  text: string;
  rebuilt?: IRebuilt | null;
  /** The plan of the last rebuild, recorded before its cells ran. */
  rebuild_plan?: IRebuildPlan | null;
  /** Where the state was read from. */
  source?: RestoreSource;
}

/** `c.GPUCheckpointApp.rebuild_skipped`. */
export type RebuildSetting = 'ask' | 'always' | 'never';

/** The summary of a kernel's last checkpoint. */
export interface ILastCheckpoint {
  id: string;
  bytes_total?: number;
  bytes_written?: number;
  /** Seconds since the epoch, server clock. */
  time?: number;
  variables?: number;
  skipped?: ISkippedVariable[];
  last_cell?: number;
  /** Missing from servers without staged suspends: durable. */
  durability?: Durability;
}

/**
 * The write of a staged checkpoint to the store: its progress while a writer runs, or
 * the last failed attempt's error while the server waits to try again.
 */
export interface IWriteBehind {
  checkpoint_id: string;
  bytes_done?: number;
  bytes_total?: number;
  /** Failed attempts so far. */
  attempts?: number;
  error?: string;
}

/**
 * The reclaim policy's last decision for a kernel (the kernel model's `policy`), e.g.
 * `{action: null, reason: "kept: group floor (research keeps 2 GPU(s))"}` or
 * `{action: "warn", reason: "idle 28 min (timeout 30 min)", due_in: 120}`. After a warning
 * the passes until the suspend falls due keep it warned: `action` null, `due_in` the seconds
 * left, and a reason starting `warned: suspend in 2 min; `.
 */
export interface IPolicyDecision {
  /** `warn`, `suspend`, `checkpoint`, `convert`, or null: kept as it is. */
  action: string | null;
  reason: string;
  /** Seconds until a warned suspend falls due, as of the policy pass; else null. */
  due_in: number | null;
  /** The suspend serves GPU requests waiting (else the idle limit was reached). */
  for_demand: boolean;
  /** When the warned suspend falls due (ms, browser clock): set in the browser from `due_in`. */
  due_at?: number;
}

/** One kernel's model from `GET /api/gpuckpt/kernels[/{id}]`. */
export interface IKernel {
  id: string;
  name?: string;
  kernelspec?: string;
  state: KernelState;
  /** 0..1 while a checkpoint or restore writes or reads, else null. */
  progress: number | null;
  idle_seconds: number | null;
  gpus: IGPU[];
  last_checkpoint: ILastCheckpoint | null;
  last_error: string | null;
  notice: string | null;
  suspendable: boolean;
  execution_state?: string | null;
  suspended_for?: number | null;
  /** Seconds since it was parked, while it is. */
  parked_for?: number | null;
  /** The write of its staged checkpoint to the store, while one is under way; else null. */
  write_behind?: IWriteBehind | null;
  connections?: number;
  /** Why a resume waits, e.g. for a GPU held by another kernel, or queued in Slurm; null when it does not. */
  waiting_for_gpus?: string | null;
  /** Where kernels of its kernelspec run: on the server's host, or as Slurm jobs. */
  placement?: 'local' | 'slurm' | null;
  /** The node it runs on (Slurm's node name), null while it is suspended or queued. */
  node?: string | null;
  /** Its Slurm job, for Slurm kernels that run or wait in the queue. */
  job_id?: string | null;
  /** The last restore's report, with the rebuild since if any; null before a restore. */
  report?: IRestoreReport | null;
  /** The admin's setting: offer to re-run the cells that rebuild what was not restored. */
  rebuild_skipped?: RebuildSetting;
  /** The policy's last decision and why; null before its first pass over the kernel. */
  policy?: IPolicyDecision | null;
  /** When this model was fetched or last changed by an event (ms, browser clock). */
  received_at?: number;
}

/** What `POST .../{action}` did: `started` (202), or with `?wait=1` how it ended. */
export type Outcome =
  | 'started'
  | 'done'
  | 'already running'
  | 'already suspended'
  | 'already parked';

/** The answer of `POST /api/gpuckpt/kernels/{id}/{action}`: the kernel and the outcome. */
export interface IActionResult extends IKernel {
  outcome: Outcome;
  /** `rebuild` only. */
  rebuilt?: IRebuilt;
}

/**
 * The answer of `POST /api/gpuckpt/kernels/{id}/returned`: the kernel, and `started` or why
 * no resume started (the kernel is not away, or the server's `resume_on_return` is off).
 */
export interface IReturnResult extends IKernel {
  outcome: string;
}

/** `GET /api/gpuckpt/gpus`. */
export interface IGPUs {
  node?: string;
  gpus: IGPU[];
}

/** One checkpoint from `GET /api/gpuckpt/kernels/{id}/checkpoints`. */
export interface ICheckpointInfo {
  id: string;
  created: string | null;
  nbytes: number;
  variables: number;
  skipped: number;
  parent: string | null;
  kernel_id: string | null;
  notebook: string | null;
  problem: string | null;
  /** Missing from servers without staged suspends: durable. */
  durability?: Durability;
}

export type EventName =
  'checkpoint' | 'suspend' | 'resume' | 'restore-after-failure';

/**
 * Where an operation is. A suspend also says `released` (its GPUs are free) before `done`,
 * then, for a staged checkpoint, `writing` and `write_failed` (retried) until `durable`.
 */
export type Phase =
  | 'started'
  | 'progress'
  | 'released'
  | 'done'
  | 'failed'
  | 'writing'
  | 'write_failed'
  | 'durable';

/** A jupyter_gpuckpt event, with its name taken from the schema id. */
export interface IGpuckptEvent {
  event: EventName;
  kernel_id: string;
  phase: Phase;
  reason?: 'request' | 'policy' | 'periodic' | 'execute';
  checkpoint_id?: string;
  bytes?: number;
  bytes_written?: number;
  bytes_done?: number;
  bytes_total?: number;
  gpus_released?: number;
  seconds?: number;
  lost_cells?: number[];
  /** suspend `done`: processes that outlived the suspend, as "pid N (command)". */
  survivors?: string[];
  error?: string;
  /** suspend `released` and `done`: where the checkpoint is. */
  durability?: Durability;
  /** suspend `released` and `done`: how the GPUs were freed. */
  mode?: ReleaseMode;
  /** suspend `released` and `done`: why the state went straight to the store. */
  not_staged?: string;
  /** suspend `released` and `done`: why the kernel was suspended rather than parked. */
  not_parked?: string;
  /** suspend `released` without `started`: a parked kernel's process was ended by the server. */
  was_parked?: boolean;
  /** suspend `write_failed`: seconds until the write is tried again (absent: not retried). */
  retry_in?: number;
  /** resume `done`: where the state was read from. */
  source?: RestoreSource;
}

/** What a `policy` event says the reclaim policy does. */
export type PolicyAction = 'warn' | 'suspend' | 'kept';

/**
 * A jupyter_gpuckpt `policy` event: a warning of a coming suspend (`warn`, due in `due_in`
 * seconds), a policy suspend starting now (`suspend`; the suspend's own events follow), or
 * the user's "Keep running" (`kept`).
 */
export interface IPolicyEvent {
  kernel_id: string;
  action: PolicyAction;
  /** Why, for the user: `idle 42 min (timeout 45 min)`, `idle 12 min, 2 waiting for GPUs`. */
  reason: string;
  /** `warn`: seconds until the suspend falls due; else null. */
  due_in: number | null;
  for_demand: boolean;
}

/** The little of a TranslationBundle that the pure code uses. */
export interface ITrans {
  __(msgid: string, ...args: any[]): string;
}
