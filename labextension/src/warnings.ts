/**
 * Warnings of a coming policy suspend, with a "Keep running" button: one notification per
 * kernel whose notebook is open here, changed in place when the policy warns again, and
 * taken away when the warning is void (the user kept the kernel or ran a cell, the suspend
 * began, the kernel went away).
 *
 * Pure: it shows notifications through an `IToaster` (JupyterLab's `Notification` in
 * notifications.ts, a fake in the unit tests), so it runs under plain node.
 */
import { isWarned, dueIn, policyReason, warningText } from './policy';
import { IKernel, IPolicyEvent, ITrans } from './types';

/** Milliseconds the "kept running" success stays on screen. */
const SUCCESS_CLOSE = 5000;

export type ToastType =
  'info' | 'in-progress' | 'success' | 'warning' | 'error';

/** A notification's button, as JupyterLab's `Notification.IAction`. */
export interface IToastAction {
  label: string;
  caption?: string;
  displayType?: 'default' | 'accent' | 'warn' | 'link';
  /** Without `preventDefault()` JupyterLab closes the notification after the callback. */
  callback: (event: { preventDefault(): void }) => void;
}

export interface IToastOptions {
  autoClose: number | false;
  actions?: IToastAction[];
}

/** What the warnings need of JupyterLab's `Notification`. */
export interface IToaster {
  emit(message: string, type: ToastType, options: IToastOptions): string;
  update(
    id: string,
    message: string,
    type: ToastType,
    options: IToastOptions
  ): boolean;
  dismiss(id: string): void;
}

/** A warning on screen. */
interface IShownWarning {
  id: string;
  /** The notebook's name, as the message says it. */
  name: string;
  reason: string;
  /** When the suspend falls due, and the notification closes by itself (ms). */
  dueAt: number;
  /** A "Keep running" is on its way to the server. */
  keeping: boolean;
}

export class PolicyWarnings {
  constructor(options: PolicyWarnings.IOptions) {
    this._toaster = options.toaster;
    this._trans = options.trans;
    this._name = options.name;
    this._keep = options.keep;
    this._now = options.now ?? Date.now;
  }

  /** Show warnings (false: only take away those on screen). */
  enabled = true;

  /** Kernels with a warning on screen, by id, and the notification's id. */
  get shown(): ReadonlyMap<string, string> {
    return new Map([...this._shown].map(([k, w]) => [k, w.id]));
  }

  /**
   * A policy event: a warning is shown (or the one on screen changed), a suspend or a
   * "Keep running" takes it away.
   */
  onEvent(event: IPolicyEvent): void {
    if (event.action === 'warn') {
      this._warn(event.kernel_id, event.reason, event.due_in ?? 0);
    } else {
      this.dismiss(event.kernel_id);
    }
  }

  /**
   * After the model changed: a warning the kernel no longer has goes away (it ran a cell,
   * it is suspended or gone). After a fetch (`fetched`), a warned kernel the user was not
   * told of yet (the page was loaded after the warning) gets its warning too.
   */
  sync(kernels: ReadonlyMap<string, IKernel>, fetched: boolean): void {
    for (const kernelId of [...this._shown.keys()]) {
      const kernel = kernels.get(kernelId);
      if (kernel === undefined) {
        // a kernel may be news to the model before the fetch: only a fetch says it is gone
        if (fetched) {
          this.dismiss(kernelId);
        }
      } else if (
        kernel.state !== 'running' ||
        // `undefined`: a server that does not say, so the warning's events decide
        (kernel.policy !== undefined && !isWarned(kernel.policy))
      ) {
        this.dismiss(kernelId);
      }
    }
    if (!fetched) {
      return;
    }
    for (const kernelId of [...this._told]) {
      if (!isWarned(kernels.get(kernelId)?.policy)) {
        this._told.delete(kernelId);
      }
    }
    const now = this._now();
    for (const kernel of kernels.values()) {
      const seconds = dueIn(kernel, now);
      if (
        seconds !== null &&
        seconds > 0 &&
        kernel.policy &&
        !this._told.has(kernel.id)
      ) {
        this._warn(kernel.id, policyReason(kernel.policy), seconds);
      }
    }
  }

  /**
   * "Keep running": ask the server, then replace the warning with a short success; on an
   * error, the warning stays (to try again) and the server's message is shown.
   */
  async keep(kernelId: string): Promise<void> {
    const shown = this._shown.get(kernelId);
    if (!shown || shown.keeping) {
      return;
    }
    const trans = this._trans;
    shown.keeping = true;
    this._toaster.update(
      shown.id,
      trans.__('%1: keeping the kernel running…', shown.name),
      'in-progress',
      { autoClose: false, actions: [] }
    );
    try {
      await this._keep(kernelId);
    } catch (error) {
      shown.keeping = false;
      if (this._shown.get(kernelId) === shown) {
        this._show(kernelId, shown);
      }
      this._toaster.emit(
        trans.__(
          '%1: could not keep the kernel running: %2',
          shown.name,
          (error as Error).message ?? String(error)
        ),
        'error',
        { autoClose: false }
      );
      return;
    }
    // the model's change or the `kept` event may have taken it away already
    this.dismiss(kernelId);
    this._toaster.emit(trans.__('%1: kept running.', shown.name), 'success', {
      autoClose: SUCCESS_CLOSE
    });
  }

  /** Take a kernel's warning away, if one is on screen. */
  dismiss(kernelId: string): void {
    const shown = this._shown.get(kernelId);
    this._told.delete(kernelId);
    if (shown) {
      this._shown.delete(kernelId);
      this._toaster.dismiss(shown.id);
    }
  }

  /** Take every warning away. */
  dispose(): void {
    for (const kernelId of [...this._shown.keys()]) {
      this.dismiss(kernelId);
    }
  }

  private _warn(kernelId: string, reason: string, seconds: number): void {
    if (!this.enabled) {
      return;
    }
    const name = this._name(kernelId);
    this._told.add(kernelId);
    if (name === null) {
      return; // its notebook is not open here
    }
    const now = this._now();
    const dueAt = now + Math.max(0, seconds) * 1000;
    const shown = this._shown.get(kernelId);
    if (shown && !shown.keeping && now < shown.dueAt) {
      // warned again while the last warning is on screen: change it, no second one
      Object.assign(shown, { name, reason, dueAt });
      this._show(kernelId, shown);
      return;
    }
    if (shown) {
      this.dismiss(kernelId);
      this._told.add(kernelId);
    }
    const warning: IShownWarning = {
      id: '',
      name,
      reason,
      dueAt,
      keeping: false
    };
    this._shown.set(kernelId, warning);
    this._show(kernelId, warning);
  }

  /** Show (or show again, as it is now) a warning; a new one when `id` is empty. */
  private _show(kernelId: string, warning: IShownWarning): void {
    const trans = this._trans;
    const left = Math.max(0, warning.dueAt - this._now());
    const message = warningText(
      warning.name,
      left / 1000,
      warning.reason,
      trans
    );
    const options: IToastOptions = {
      // it says when the suspend falls due: then it has nothing left to say
      autoClose: Math.max(1000, Math.round(left)),
      actions: [
        {
          label: trans.__('Keep running'),
          caption: trans.__(
            'Count this as activity: the kernel is not suspended now, and its idle time starts again'
          ),
          displayType: 'accent',
          callback: event => {
            // keep the notification until the server answered
            event.preventDefault();
            void this.keep(kernelId);
          }
        }
      ]
    };
    if (
      warning.id &&
      this._toaster.update(warning.id, message, 'warning', options)
    ) {
      return;
    }
    warning.id = this._toaster.emit(message, 'warning', options);
  }

  private _toaster: IToaster;
  private _trans: ITrans;
  private _name: (kernelId: string) => string | null;
  private _keep: (kernelId: string) => Promise<unknown>;
  private _now: () => number;
  private _shown = new Map<string, IShownWarning>();
  /** Kernels whose current warning was shown, or is not shown because their notebook is not open here. */
  private _told = new Set<string>();
}

export namespace PolicyWarnings {
  export interface IOptions {
    toaster: IToaster;
    trans: ITrans;
    /** The name of the kernel's notebook if it is open in this JupyterLab, else null. */
    name: (kernelId: string) => string | null;
    /** Ask the server to keep the kernel running (`POST .../keep`). */
    keep: (kernelId: string) => Promise<unknown>;
    /** The clock (ms); Date.now. */
    now?: () => number;
  }
}
