/**
 * Notifications: progress of checkpoints and restores with the bytes done, and notices
 * the user must see (a policy suspend, a restore after failure, skipped variables, a
 * staged checkpoint that could not be written to the store yet), and warnings of a coming
 * policy suspend with a "Keep running" button (warnings.ts).
 */
import { Notification } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';
import { Session } from '@jupyterlab/services';
import { TranslationBundle } from '@jupyterlab/translation';
import {
  baseName,
  formatBytes,
  formatDuration,
  formatProgress,
  releasedText,
  skippedText,
  survivorsText,
  writeFailedText
} from './format';
import { GPUCheckpointModel } from './model';
import { IGpuckptEvent, IKernel } from './types';
import { IToaster, PolicyWarnings } from './warnings';

/** How much to tell: progress and notices, notices only, or nothing. */
export type NotificationDetail = 'progress' | 'notices' | 'none';

/** Milliseconds a success or a write-failure warning stays on screen. */
const AUTO_CLOSE = 5000;
const WARNING_CLOSE = 10_000;

/** A notification still worth changing when a staged checkpoint's write moves on. */
interface IShown {
  id: string;
  /** When it was last shown (ms): a toast closed since is not popped up again. */
  at: number;
  event: IGpuckptEvent;
}

/** JupyterLab's notifications, as the policy warnings use them. */
const toaster: IToaster = {
  emit: (message, type, options) => Notification.emit(message, type, options),
  update: (id, message, type, options) =>
    Notification.update({ id, message, type, ...options }),
  dismiss: id => Notification.dismiss(id)
};

export class GPUCheckpointNotifier {
  constructor(options: GPUCheckpointNotifier.IOptions) {
    this._model = options.model;
    this._sessions = options.sessions;
    this._tracker = options.tracker ?? null;
    this._trans = options.trans;
    this._warnings = new PolicyWarnings({
      toaster,
      trans: this._trans,
      name: kernelId => this._openNotebook(kernelId),
      keep: kernelId => this._model.keep(kernelId)
    });
    this.detail = options.detail ?? 'progress';
    this._model.eventReceived.connect((_, event) => this._onEvent(event));
    this._model.refreshed.connect((_, before) => this._onRefreshed(before));
    this._model.policyReceived.connect((_, event) =>
      this._warnings.onEvent(event)
    );
    this._model.changed.connect(() =>
      this._warnings.sync(this._model.kernels, false)
    );
  }

  /** What to tell; warnings of a coming suspend are notices, shown unless `none`. */
  get detail(): NotificationDetail {
    return this._detail;
  }

  set detail(value: NotificationDetail) {
    this._detail = value;
    this._warnings.enabled = value !== 'none';
  }

  /**
   * The name of the kernel's notebook if it is open in this JupyterLab (without a notebook
   * tracker: if a session of the server has it), else null.
   */
  private _openNotebook(kernelId: string): string | null {
    if (!this._tracker) {
      for (const session of this._sessions?.running() ?? []) {
        if (session.kernel?.id === kernelId) {
          return baseName(session.path);
        }
      }
      return null;
    }
    const panel = this._tracker.find(
      p => p.sessionContext.session?.kernel?.id === kernelId
    );
    return panel ? baseName(panel.sessionContext.path) : null;
  }

  private _name(kernelId: string): string {
    for (const session of this._sessions?.running() ?? []) {
      if (session.kernel?.id === kernelId) {
        return session.path.split('/').pop() ?? session.path;
      }
    }
    return this._trans.__('kernel %1', kernelId.slice(0, 8));
  }

  private _verb(event: IGpuckptEvent): string {
    const trans = this._trans;
    switch (event.event) {
      case 'checkpoint':
        return trans.__('Checkpointing');
      case 'suspend':
        return trans.__('Suspending');
      default:
        return trans.__('Restoring');
    }
  }

  private _onEvent(event: IGpuckptEvent): void {
    if (this.detail === 'none') {
      return;
    }
    const trans = this._trans;
    const key = `${event.event}:${event.kernel_id}`;
    const id = this._ids.get(key);
    const name = this._name(event.kernel_id);
    // periodic checkpoints show in the status bar only, unless they fail
    const quiet = this.detail !== 'progress' || event.reason === 'periodic';
    switch (event.phase) {
      case 'started':
        this._started.add(key);
        if (!quiet) {
          this._ids.set(
            key,
            Notification.emit(
              trans.__('%1 %2…', this._verb(event), name),
              'in-progress',
              {
                autoClose: false,
                progress: 0
              }
            )
          );
        }
        break;
      case 'progress':
        if (id) {
          Notification.update({
            id,
            type: 'in-progress',
            autoClose: false,
            progress: event.bytes_total
              ? (event.bytes_done ?? 0) / event.bytes_total
              : undefined,
            message: trans.__(
              '%1 %2: %3 of %4 (%5)',
              this._verb(event),
              name,
              formatBytes(event.bytes_done),
              formatBytes(event.bytes_total),
              formatProgress(
                event.bytes_total
                  ? (event.bytes_done ?? 0) / event.bytes_total
                  : null
              )
            )
          });
        }
        break;
      case 'released':
        // `done` follows and tells; a `released` of its own is a parked kernel whose
        // process the server ended (parked too long, or host memory ran short)
        if (event.was_parked) {
          Notification.info(
            trans.__(
              '%1 was parked too long or host memory ran short, so its process was ended: it is suspended now. Running a cell restores it from its checkpoint.',
              name
            ),
            { autoClose: false }
          );
        }
        break;
      case 'done': {
        const shown = this._done(event, name, id);
        this._ids.delete(key);
        this._started.delete(key);
        if (
          shown &&
          event.checkpoint_id &&
          event.event === 'suspend' &&
          event.durability === 'staged'
        ) {
          this._staged.set(event.checkpoint_id, {
            id: shown,
            at: Date.now(),
            event
          });
        }
        break;
      }
      case 'write_failed':
        this._writeFailed(event, name);
        break;
      case 'durable':
        this._durable(event, name);
        break;
      case 'failed': {
        const message = trans.__(
          '%1 %2 failed: %3',
          this._verb(event),
          name,
          event.error ?? ''
        );
        if (id) {
          Notification.update({ id, message, type: 'error', autoClose: false });
        } else {
          Notification.error(message, { autoClose: false });
        }
        this._ids.delete(key);
        this._started.delete(key);
        break;
      }
    }
  }

  /**
   * A staged checkpoint's write failed: one warning per checkpoint, changed in place
   * while it is on screen (the writes are retried for as long as it takes; the card and
   * the status bar say how it goes).
   */
  private _writeFailed(event: IGpuckptEvent, name: string): void {
    const checkpointId = event.checkpoint_id ?? '';
    if (typeof event.retry_in !== 'number') {
      // not retried: the staged copy is lost, and the kernel's notice says what it falls
      // back to (the fetch after this event brings it)
      this._staged.delete(checkpointId);
      return;
    }
    const message = writeFailedText(event, name, this._trans);
    const now = Date.now();
    const shown = this._failedWrites.get(checkpointId);
    if (!shown) {
      const id = Notification.warning(message, { autoClose: WARNING_CLOSE });
      this._failedWrites.set(checkpointId, { id, at: now, event });
    } else if (now - shown.at < WARNING_CLOSE) {
      Notification.update({
        id: shown.id,
        message,
        type: 'warning',
        autoClose: WARNING_CLOSE
      });
      shown.at = now;
    }
  }

  /**
   * A staged checkpoint is in the store: the suspend's notification says so while it is
   * on screen, and a write-failure warning turns into good news.
   */
  private _durable(event: IGpuckptEvent, name: string): void {
    const trans = this._trans;
    const checkpointId = event.checkpoint_id ?? '';
    const staged = this._staged.get(checkpointId);
    const failed = this._failedWrites.get(checkpointId);
    this._staged.delete(checkpointId);
    this._failedWrites.delete(checkpointId);
    if (failed) {
      Notification.update({
        id: failed.id,
        message: trans.__(
          '%1: its checkpoint is in the store now, after all.',
          name
        ),
        type: 'success',
        autoClose: AUTO_CLOSE
      });
    } else if (staged && Date.now() - staged.at < AUTO_CLOSE) {
      Notification.update({
        id: staged.id,
        message: releasedText(
          { ...staged.event, durability: 'durable' },
          name,
          trans
        ),
        type: 'success',
        autoClose: AUTO_CLOSE
      });
    }
  }

  /** Tell how an operation ended; the id of the notification that says so, if any. */
  private _done(
    event: IGpuckptEvent,
    name: string,
    id: string | undefined
  ): string | undefined {
    const trans = this._trans;
    let message: string;
    let type: Notification.TypeOptions = 'success';
    let autoClose: number | false = AUTO_CLOSE;
    if (event.event === 'suspend') {
      message = releasedText(event, name, trans);
      if (event.reason === 'policy') {
        const kernel = this._model.kernel(event.kernel_id);
        const idle = formatDuration(kernel?.idle_seconds ?? null);
        message =
          event.mode === 'park'
            ? trans.__(
                '%1 was parked after %2 idle; its GPU is lent out. Run a cell to resume.',
                name,
                idle
              )
            : trans.__(
                '%1 was suspended after %2 idle; its GPU is lent out. Run a cell to resume.',
                name,
                idle
              );
        type = 'warning';
        autoClose = false;
      }
      // processes that outlived the suspend may still hold GPU memory: always worth a word
      const survivors = survivorsText(event.survivors, name, trans);
      if (survivors) {
        message = survivors;
        type = 'warning';
        autoClose = false;
        // the server's notice says the same; the fetch after this event brings it
        this._toldNotice.add(event.kernel_id);
      }
    } else if (event.event === 'checkpoint') {
      message = trans.__(
        '%1 checkpointed: %2 (%3 new).',
        name,
        formatBytes(event.bytes),
        formatBytes(event.bytes_written)
      );
    } else if (event.event === 'resume') {
      message = trans.__('%1 resumed.', name);
    } else {
      const cells = event.lost_cells ?? [];
      message = cells.length
        ? trans.__(
            '%1 died and was restored from its last checkpoint. Re-run cells %2.',
            name,
            cells.join(', ')
          )
        : trans.__(
            '%1 died and was restored from its last checkpoint; nothing was lost.',
            name
          );
      type = 'warning';
      autoClose = false;
    }
    if (this.detail !== 'progress' && type === 'success') {
      return undefined;
    }
    if (id) {
      Notification.update({ id, message, type, autoClose });
      return id;
    } else if (event.reason !== 'periodic' || type !== 'success') {
      return Notification.emit(message, type, { autoClose });
    }
    return undefined;
  }

  /** After a fetch: new skipped variables and new notices are worth a word. */
  private _onRefreshed(before: ReadonlyMap<string, IKernel>): void {
    this._warnings.sync(this._model.kernels, true);
    if (this.detail === 'none') {
      return;
    }
    for (const kernel of this._model.kernels.values()) {
      const old = before.get(kernel.id);
      if (!old) {
        if (kernel.last_checkpoint) {
          this._told.add(kernel.last_checkpoint.id);
        }
        continue;
      }
      const checkpoint = kernel.last_checkpoint;
      // events already changed the id in the model: remember which were told instead
      if (checkpoint && !this._told.has(checkpoint.id)) {
        this._told.add(checkpoint.id);
        const skipped = skippedText(checkpoint.skipped, this._trans);
        if (skipped) {
          Notification.warning(`${this._name(kernel.id)}: ${skipped}`, {
            autoClose: false
          });
        }
      }
      const told = this._toldNotice.delete(kernel.id);
      if (kernel.notice && kernel.notice !== old.notice && !told) {
        Notification.info(`${this._name(kernel.id)}: ${kernel.notice}`, {
          autoClose: false
        });
      }
    }
  }

  private _model: GPUCheckpointModel;
  private _sessions: Session.IManager | null;
  private _tracker: INotebookTracker | null;
  private _trans: TranslationBundle;
  private _detail: NotificationDetail = 'progress';
  private _warnings: PolicyWarnings;
  private _ids = new Map<string, string>();
  private _told = new Set<string>();
  /** Kernels whose next notice a notification already told. */
  private _toldNotice = new Set<string>();
  /** Operations (`event:kernel`) whose `started` came. */
  private _started = new Set<string>();
  /** Staged suspends' notifications, by checkpoint id, until their checkpoint is durable. */
  private _staged = new Map<string, IShown>();
  /** Write-failure warnings, by checkpoint id, until their checkpoint is durable. */
  private _failedWrites = new Map<string, IShown>();
}

export namespace GPUCheckpointNotifier {
  export interface IOptions {
    model: GPUCheckpointModel;
    sessions: Session.IManager | null;
    /** The notebooks open here: only their kernels' warnings are shown. */
    tracker?: INotebookTracker | null;
    trans: TranslationBundle;
    detail?: NotificationDetail;
  }
}
