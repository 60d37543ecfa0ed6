/**
 * What the browser knows of the server's checkpointable kernels and GPUs.
 *
 * Fed by the server's event stream (jupyter_events, /api/events/subscribe): each
 * jupyter_gpuckpt event updates the kernel at once (reduce.ts) and, unless it only reports
 * progress (`progress`, `writing`), schedules one REST fetch that brings the server's full model. Cells that run
 * restart a kernel's idle time here (`markActivity`) without a fetch. The policy's events
 * (a warning of a coming suspend, the user's "Keep running") update the kernel's `policy`
 * (policy.ts) and are passed on (`policyReceived`). Nothing polls.
 */
import { Event, ServerConnection } from '@jupyterlab/services';
import { Token } from '@lumino/coreutils';
import { IDisposable } from '@lumino/disposable';
import { Debouncer } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';
import { GPUCheckpointAPI, KernelAction } from './handler';
import { applyPolicyEvent, parsePolicyEvent, stampPolicy } from './policy';
import { applyEvent, markActivity, parseEvent } from './reduce';
import {
  IActionResult,
  IGPU,
  IGpuckptEvent,
  IKernel,
  IPolicyEvent,
  ReleaseMode
} from './types';

export class GPUCheckpointModel implements IDisposable {
  constructor(options: GPUCheckpointModel.IOptions) {
    this._settings = options.serverSettings;
    this._events = options.events;
    this._debouncer = new Debouncer(
      () => this._fetch(),
      options.debounce ?? 150
    );
    this._events?.stream.connect(this._onEvent, this);
  }

  /** Emitted whenever kernels, GPUs or the fetch error change. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** Every jupyter_gpuckpt event, after the kernel it names was updated. */
  get eventReceived(): ISignal<this, IGpuckptEvent> {
    return this._eventReceived;
  }

  /** Every `policy` event (warn, suspend, kept), after the kernel it names was updated. */
  get policyReceived(): ISignal<this, IPolicyEvent> {
    return this._policyReceived;
  }

  /** Emitted after a fetch with the kernels as they were before it, to spot news. */
  get refreshed(): ISignal<this, ReadonlyMap<string, IKernel>> {
    return this._refreshed;
  }

  get kernels(): ReadonlyMap<string, IKernel> {
    return this._kernels;
  }

  get gpus(): readonly IGPU[] {
    return this._gpus;
  }

  get serverSettings(): ServerConnection.ISettings {
    return this._settings;
  }

  get node(): string | null {
    return this._node;
  }

  /** The last fetch's error, or null. */
  get error(): string | null {
    return this._error;
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  kernel(kernelId: string | null | undefined): IKernel | undefined {
    return kernelId ? this._kernels.get(kernelId) : undefined;
  }

  /** Fetch kernels and GPUs soon (calls close together make one fetch). */
  refresh(): Promise<void> {
    return this._debouncer.invoke();
  }

  /**
   * Ask the server for `action` on a kernel, then show its answer.
   *
   * @param options.wait answer when the action ended, with its `outcome`
   * @param options.mode `suspend` only: park the kernel, or end its process
   */
  async act(
    kernelId: string,
    action: KernelAction,
    options: { wait?: boolean; mode?: ReleaseMode } = {}
  ): Promise<IActionResult> {
    const result = await GPUCheckpointAPI.act(
      kernelId,
      action,
      this._settings,
      options.wait ?? false,
      options.mode
    );
    // eslint-disable-next-line @typescript-eslint/no-unused-vars
    const { outcome, rebuilt, ...kernel } = result;
    this._set(kernel);
    void this.refresh();
    return result;
  }

  /**
   * The user's "Keep running": the server counts it as activity, so a warned suspend is off
   * and the kernel's idle time starts again.
   *
   * @returns the kernel's model, as the server answered
   * @throws ServerConnection.ResponseError with the server's message
   */
  async keep(kernelId: string): Promise<IKernel> {
    const kernel = await GPUCheckpointAPI.keep(kernelId, this._settings);
    this._set(kernel);
    return kernel;
  }

  /**
   * A kernel ran something (its notebook saw it go busy or idle): its idle time starts
   * again. No fetch: the server's idle time says the same, and events tell the rest.
   */
  markActivity(kernelId: string | null | undefined): void {
    const kernel = this.kernel(kernelId);
    const next = markActivity(kernel);
    if (next && next !== kernel) {
      this._kernels.set(next.id, next);
      this._changed.emit();
    }
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._events?.stream.disconnect(this._onEvent, this);
    this._debouncer.dispose();
    Signal.clearData(this);
  }

  private _set(kernel: IKernel): void {
    const now = Date.now();
    this._kernels.set(
      kernel.id,
      stampPolicy(
        { ...kernel, received_at: now },
        this._kernels.get(kernel.id),
        now
      )
    );
    this._changed.emit();
  }

  private _onEvent(_: Event.IManager, message: Event.Emission): void {
    const policy = parsePolicyEvent(message);
    if (policy) {
      this._onPolicyEvent(policy);
      return;
    }
    const event = parseEvent(message);
    if (!event) {
      return;
    }
    const next = applyEvent(this._kernels.get(event.kernel_id), event);
    if (next) {
      this._kernels.set(next.id, next);
    }
    this._changed.emit();
    this._eventReceived.emit(event);
    // progress, of an operation or of a staged checkpoint's write, comes often and
    // changes nothing the event does not say
    if (event.phase !== 'progress' && event.phase !== 'writing') {
      void this.refresh();
    }
  }

  private _onPolicyEvent(event: IPolicyEvent): void {
    const kernel = this._kernels.get(event.kernel_id);
    const next = applyPolicyEvent(kernel, event);
    if (next) {
      this._kernels.set(next.id, next);
    }
    this._changed.emit();
    this._policyReceived.emit(event);
    // a warning says all there is; a suspend's own events follow; a kept kernel's idle
    // time restarted on the server, and a kernel not fetched yet is news
    if (!kernel || event.action === 'kept') {
      void this.refresh();
    }
  }

  private async _fetch(): Promise<void> {
    if (this._isDisposed) {
      return;
    }
    const before = new Map(this._kernels);
    try {
      const [kernels, gpus] = await Promise.all([
        GPUCheckpointAPI.kernels(this._settings),
        GPUCheckpointAPI.gpus(this._settings)
      ]);
      const now = Date.now();
      this._kernels = new Map(
        kernels.map(k => [
          k.id,
          stampPolicy({ ...k, received_at: now }, before.get(k.id), now)
        ])
      );
      this._gpus = gpus.gpus ?? [];
      this._node = gpus.node ?? null;
      this._error = null;
    } catch (error) {
      this._error = (error as Error).message ?? String(error);
    }
    this._changed.emit();
    this._refreshed.emit(before);
  }

  private _settings: ServerConnection.ISettings;
  private _events: Event.IManager | null;
  private _debouncer: Debouncer;
  private _kernels = new Map<string, IKernel>();
  private _gpus: IGPU[] = [];
  private _node: string | null = null;
  private _error: string | null = null;
  private _isDisposed = false;
  private _changed = new Signal<this, void>(this);
  private _eventReceived = new Signal<this, IGpuckptEvent>(this);
  private _policyReceived = new Signal<this, IPolicyEvent>(this);
  private _refreshed = new Signal<this, ReadonlyMap<string, IKernel>>(this);
}

export namespace GPUCheckpointModel {
  export interface IOptions {
    /** Where the REST API is. */
    serverSettings: ServerConnection.ISettings;
    /** The server's event stream; without it the model only changes on refresh(). */
    events: Event.IManager | null;
    /** Milliseconds to gather refresh() calls into one fetch (150). */
    debounce?: number;
  }
}

/**
 * The model, shared between this package's plugins. Internal: index.ts does not export
 * it, and no other package should depend on it.
 */
export const IGPUCheckpointModel = new Token<GPUCheckpointModel>(
  'jupyter-gpuckpt:IGPUCheckpointModel',
  'The checkpointable kernels and GPUs of the server, kept up to date from its events.'
);
