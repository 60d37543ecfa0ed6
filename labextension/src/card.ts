/**
 * One kernel in the panel: a card built once and then changed in place, part by part,
 * from a `IKernelCardView` (view.ts).
 */
import { TranslationBundle } from '@jupyterlab/translation';
import {
  buildIcon,
  checkIcon,
  deleteIcon,
  historyIcon,
  runIcon,
  saveIcon
} from '@jupyterlab/ui-components';
import { formatBytes } from './format';
import {
  h,
  iconButton,
  setAttr,
  setEnabled,
  setHidden,
  setLabel,
  setText,
  syncChildren
} from './dom';
import { gpuckptIcon, parkIcon } from './icon';
import { ICheckpointInfo } from './types';
import { IKernelCardView } from './view';

/** What the card's buttons do; the panel runs the commands. */
export interface ICardActions {
  checkpoint(): Promise<unknown>;
  suspend(): Promise<unknown>;
  park(): Promise<unknown>;
  resume(): Promise<unknown>;
  rebuild(): Promise<unknown>;
  keep(): Promise<unknown>;
  toggleCheckpoints(): void;
  deleteCheckpoint(id: string): Promise<unknown>;
}

export class KernelCard {
  constructor(
    kernelId: string,
    actions: ICardActions,
    trans: TranslationBundle
  ) {
    this._trans = trans;
    const line = (cls: string) => h('div', { class: `jp-gpuckpt-line ${cls}` });
    this._name = h('span', { class: 'jp-gpuckpt-notebook' });
    this._state = h('span', { class: 'jp-gpuckpt-state' });
    this._gpus = h('div', { class: 'jp-gpuckpt-kernel-gpus' });
    this._idle = line('jp-gpuckpt-idle');
    this._checkpoint = line('jp-gpuckpt-last');
    this._waiting = line('jp-gpuckpt-waiting');
    this._policy = line('jp-gpuckpt-policy');
    this._warningText = h('span', { class: 'jp-gpuckpt-report-text' });
    this._error = line('jp-gpuckpt-error');
    this._notice = line('jp-gpuckpt-notice');
    this._reportText = h('span', { class: 'jp-gpuckpt-report-text' });
    this._buttons = {
      checkpoint: iconButton(saveIcon, trans.__('Checkpoint now'), () =>
        actions.checkpoint()
      ),
      suspend: iconButton(
        gpuckptIcon,
        trans.__('Suspend kernel (release GPU)'),
        () => actions.suspend()
      ),
      park: iconButton(parkIcon, trans.__('Park GPU kernel'), () =>
        actions.park()
      ),
      resume: iconButton(runIcon, trans.__('Resume kernel'), () =>
        actions.resume()
      ),
      checkpoints: iconButton(historyIcon, trans.__('Show checkpoints'), () =>
        actions.toggleCheckpoints()
      ),
      rebuild: iconButton(
        buildIcon,
        trans.__('Re-run the cells that rebuild what was not restored'),
        () => actions.rebuild(),
        trans.__('Rebuild')
      ),
      keep: iconButton(
        checkIcon,
        trans.__('Keep kernel running'),
        () => actions.keep(),
        trans.__('Keep running')
      )
    };
    // the accessible name is the command's label; the tooltip says what parking does
    this._buttons.park.title = trans.__(
      'Park GPU kernel: free the GPU and keep the process (suspends it where the CUDA driver cannot park)'
    );
    this._buttons.checkpoints.setAttribute('aria-expanded', 'false');
    this._report = h(
      'div',
      { class: 'jp-gpuckpt-report' },
      this._reportText,
      this._buttons.rebuild
    );
    // a suspend the policy warned of: when, why, and the way out (report's layout)
    this._warning = h(
      'div',
      { class: 'jp-gpuckpt-warning', 'data-kind': 'warning' },
      this._warningText,
      this._buttons.keep
    );
    this._checkpoints = h('ul', { class: 'jp-gpuckpt-checkpoints' });
    this._checkpoints.hidden = true;
    this._deleteCheckpoint = actions.deleteCheckpoint;
    this.node = h(
      'li',
      { class: 'jp-gpuckpt-kernel', 'data-kernel-id': kernelId },
      h('div', { class: 'jp-gpuckpt-card-head' }, this._name, this._state),
      this._gpus,
      this._idle,
      this._checkpoint,
      this._waiting,
      this._policy,
      h(
        'div',
        { class: 'jp-gpuckpt-actions' },
        this._buttons.checkpoint,
        this._buttons.suspend,
        this._buttons.park,
        this._buttons.resume,
        this._buttons.checkpoints
      ),
      this._warning,
      this._error,
      this._notice,
      this._report,
      this._checkpoints
    );
  }

  readonly node: HTMLElement;

  /** Show `view`, changing only the parts that differ from what is shown. */
  update(view: IKernelCardView): void {
    const node = this.node;
    setAttr(node, 'data-state', view.state);
    node.classList.toggle('jp-mod-busy', view.busy);
    setText(this._name, view.name);
    setAttr(this._name, 'title', view.title);
    setText(this._state, view.stateLabel);
    this._setGpus(view.gpus);
    setText(this._idle, view.idle);
    setText(this._checkpoint, view.checkpoint);
    this._checkpoint.classList.toggle('jp-mod-warn', view.writeFailed);
    setText(this._waiting, view.waiting);
    setText(this._policy, view.policy);
    setHidden(this._warning, view.warning === null);
    if (view.warning !== null) {
      setText(this._warningText, view.warning);
      setEnabled(this._buttons.keep, view.can.keep && !this._keeping);
    }
    setText(this._error, view.error);
    setText(this._notice, view.notice);

    const { checkpoint, suspend, park, resume, rebuild } = this._buttons;
    setEnabled(checkpoint, view.can.checkpoint);
    setEnabled(suspend, view.can.suspend);
    setEnabled(park, view.can.park);
    setEnabled(resume, view.can.resume);
    setHidden(suspend, !view.suspendable);
    setHidden(park, !view.suspendable);
    setHidden(resume, !view.suspendable);

    const report = view.report;
    setHidden(this._report, report === null);
    if (report) {
      setText(this._reportText, report.text);
      setAttr(this._report, 'data-kind', report.kind);
      this._report.classList.toggle('jp-mod-failed', report.failed);
      setHidden(rebuild, report.offer !== 'ask');
      setEnabled(rebuild, view.can.rebuild && !this._rebuilding);
    }
  }

  /** While a rebuild runs its button is disabled and says so. */
  set rebuilding(value: boolean) {
    this._rebuilding = value;
    const button = this._buttons.rebuild;
    const text = button.querySelector('.jp-gpuckpt-button-text') as HTMLElement;
    setText(
      text,
      value ? this._trans.__('Rebuilding…') : this._trans.__('Rebuild')
    );
    if (value) {
      setEnabled(button, false);
    }
  }

  /** While a Keep running is on its way its button is disabled. */
  set keeping(value: boolean) {
    this._keeping = value;
    if (value) {
      setEnabled(this._buttons.keep, false);
    }
  }

  /** Show the kernel's checkpoints (undefined: loading), or hide the list (null). */
  showCheckpoints(list: ICheckpointInfo[] | undefined | null): void {
    const trans = this._trans;
    const expanded = list !== null;
    const toggle = this._buttons.checkpoints;
    setAttr(toggle, 'aria-expanded', String(expanded));
    toggle.classList.toggle('jp-mod-active', expanded);
    setLabel(
      toggle,
      expanded ? trans.__('Hide checkpoints') : trans.__('Show checkpoints')
    );
    setHidden(this._checkpoints, !expanded);
    if (!expanded) {
      return;
    }
    if (list === undefined || !list.length) {
      const text = list ? trans.__('No checkpoints.') : trans.__('Loading…');
      this._checkpoints.replaceChildren(
        h('li', { class: 'jp-gpuckpt-empty' }, text)
      );
      return;
    }
    // the list changes only when the user asks for it: build it again
    this._checkpoints.replaceChildren(
      ...list.map(c => {
        const parts = [
          c.created ?? '',
          formatBytes(c.nbytes),
          trans.__('%1 variables', c.variables),
          c.skipped ? trans.__('%1 skipped', c.skipped) : '',
          c.durability === 'staged' ? trans.__('in host memory') : '',
          c.problem ?? ''
        ].filter(p => p);
        return h(
          'li',
          { class: 'jp-gpuckpt-checkpoint', 'data-checkpoint-id': c.id },
          h(
            'div',
            { class: 'jp-gpuckpt-checkpoint-text' },
            h('code', { title: c.id }, c.id.slice(0, 12)),
            ...parts.map(p => h('span', {}, p))
          ),
          iconButton(deleteIcon, trans.__('Delete checkpoint %1', c.id), () =>
            this._deleteCheckpoint(c.id)
          )
        );
      })
    );
  }

  private _setGpus(lines: string[]): void {
    const have = Array.from(this._gpus.children) as HTMLElement[];
    const nodes = lines.map(
      (_, i) =>
        have[i] ?? h('div', { class: 'jp-gpuckpt-line jp-gpuckpt-kernel-gpu' })
    );
    nodes.forEach((node, i) => setText(node, lines[i]));
    syncChildren(this._gpus, nodes);
  }

  private _trans: TranslationBundle;
  private _name: HTMLElement;
  private _state: HTMLElement;
  private _gpus: HTMLElement;
  private _idle: HTMLElement;
  private _checkpoint: HTMLElement;
  private _waiting: HTMLElement;
  private _policy: HTMLElement;
  private _warning: HTMLElement;
  private _warningText: HTMLElement;
  private _error: HTMLElement;
  private _notice: HTMLElement;
  private _report: HTMLElement;
  private _reportText: HTMLElement;
  private _checkpoints: HTMLElement;
  private _buttons: Record<
    | 'checkpoint'
    | 'suspend'
    | 'park'
    | 'resume'
    | 'checkpoints'
    | 'rebuild'
    | 'keep',
    HTMLButtonElement
  >;
  private _rebuilding = false;
  private _keeping = false;
  private _deleteCheckpoint: (id: string) => Promise<unknown>;
}
