/**
 * Resume before the user asks: when they come back to a suspended or parked kernel's notebook
 * (its tab shown, the browser window focused, typing in it), the server hears of it at once
 * (`POST .../returned`) and starts the resume, so that the cell they then run finds the kernel
 * back or nearly back. One signal per kernel at most every `interval` ms: the first one goes
 * out at once (every second counts), the ones right after it are dropped.
 */
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { IDisposable } from '@lumino/disposable';
import { GPUCheckpointAPI } from './handler';
import { GPUCheckpointModel } from './model';

/** States a return resumes. */
const AWAY = new Set(['suspended', 'parked']);

export class ReturnWatcher implements IDisposable {
  constructor(options: ReturnWatcher.IOptions) {
    this._model = options.model;
    this._tracker = options.tracker;
    this._interval = options.interval ?? 10_000;
    this._tracker.currentChanged.connect(this._onCurrent, this);
    this._tracker.widgetAdded.connect(this._onAdded, this);
    this._tracker.forEach(panel => this._onAdded(this._tracker, panel));
    document.addEventListener('visibilitychange', this._onVisible);
    window.addEventListener('focus', this._onFocus);
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._tracker.currentChanged.disconnect(this._onCurrent, this);
    this._tracker.widgetAdded.disconnect(this._onAdded, this);
    document.removeEventListener('visibilitychange', this._onVisible);
    window.removeEventListener('focus', this._onFocus);
  }

  /** The user is at `panel` now: tell the server if its kernel is away. */
  signal(panel: NotebookPanel | null): void {
    const kernelId = panel?.sessionContext.session?.kernel?.id;
    const kernel = kernelId ? this._model.kernels.get(kernelId) : undefined;
    if (!kernelId || !kernel || !AWAY.has(kernel.state)) {
      return;
    }
    const now = Date.now();
    if (now - (this._sent.get(kernelId) ?? -Infinity) < this._interval) {
      return;
    }
    this._sent.set(kernelId, now);
    GPUCheckpointAPI.returned(kernelId, this._model.serverSettings).catch(
      reason => console.warn('jupyter-gpuckpt: return signal failed', reason)
    );
  }

  private _onCurrent(_: INotebookTracker, panel: NotebookPanel | null): void {
    this.signal(panel);
  }

  private _onAdded(_: INotebookTracker, panel: NotebookPanel): void {
    // typing anywhere in the notebook (a cell's editor, command mode): capture, before editors
    panel.node.addEventListener('keydown', () => this.signal(panel), true);
  }

  private _onVisible = (): void => {
    if (document.visibilityState === 'visible') {
      this.signal(this._tracker.currentWidget);
    }
  };

  private _onFocus = (): void => this.signal(this._tracker.currentWidget);

  private _model: GPUCheckpointModel;
  private _tracker: INotebookTracker;
  private _interval: number;
  private _sent = new Map<string, number>();
  private _disposed = false;
}

export namespace ReturnWatcher {
  export interface IOptions {
    model: GPUCheckpointModel;
    tracker: INotebookTracker;
    /** Milliseconds between two signals for one kernel (default 10 s). */
    interval?: number;
  }
}
