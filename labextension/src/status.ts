/**
 * The status bar item: the current notebook's kernel state, GPUs, idle time and the age
 * of its last checkpoint. Clicking it opens the panel.
 */
import { INotebookTracker } from '@jupyterlab/notebook';
import { TranslationBundle } from '@jupyterlab/translation';
import { Widget } from '@lumino/widgets';
import { currentKernelId } from './commands';
import { statusText } from './format';
import { GPUCheckpointModel } from './model';
import { policyView } from './policy';

export class GPUCheckpointStatus extends Widget {
  constructor(options: GPUCheckpointStatus.IOptions) {
    super();
    this._model = options.model;
    this._tracker = options.tracker;
    this._trans = options.trans;
    this.addClass('jp-gpuckpt-status');
    this.node.title = this._tooltip();
    this.node.addEventListener('click', options.onClick);
    this._model.changed.connect(this.update, this);
    this._tracker.currentChanged.connect(this.update, this);
    // ages count up without asking the server
    this._timer = window.setInterval(
      () => this.update(),
      options.tick ?? 10_000
    );
    this.update();
  }

  dispose(): void {
    window.clearInterval(this._timer);
    super.dispose();
  }

  protected onUpdateRequest(): void {
    const kernel = this._model.kernel(currentKernelId(this._tracker));
    const now = Date.now();
    this.node.dataset.state = kernel?.state ?? '';
    this.node.textContent = kernel
      ? `${this._trans.__('GPU kernel')}: ${statusText(kernel, now, this._trans)}`
      : '';
    const policy = kernel ? policyView(kernel, now, this._trans) : null;
    const title = this._tooltip(policy?.warning ?? policy?.line ?? null);
    if (this.node.title !== title) {
      this.node.title = title;
    }
    this.node.classList.toggle(
      'jp-mod-busy',
      !!kernel && kernel.progress !== null
    );
  }

  /** What the item is, with the policy's word on the kernel (why it is kept, or when it is suspended). */
  private _tooltip(policy: string | null = null): string {
    const base = this._trans.__(
      'GPU checkpoint status; click to open the panel'
    );
    return policy ? `${policy}\n${base}` : base;
  }

  private _model: GPUCheckpointModel;
  private _tracker: INotebookTracker;
  private _trans: TranslationBundle;
  private _timer: number;
}

export namespace GPUCheckpointStatus {
  export interface IOptions {
    model: GPUCheckpointModel;
    tracker: INotebookTracker;
    trans: TranslationBundle;
    onClick: () => void;
    /** Milliseconds between re-renders of the ages (10 s). */
    tick?: number;
  }
}
