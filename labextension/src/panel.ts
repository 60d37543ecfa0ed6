/**
 * The side panel: the user's kernels with their state, GPUs, idle time and last
 * checkpoint, actions on each, and the server's GPUs with who holds them.
 */
import { Session } from '@jupyterlab/services';
import { TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';
import { Widget } from '@lumino/widgets';
import { CommandIDs } from './commands';
import {
  checkpointAge,
  formatBytes,
  formatDuration,
  formatGpus,
  formatState,
  idleSeconds
} from './format';
import { GPUCheckpointAPI } from './handler';
import { gpuckptIcon } from './icon';
import { GPUCheckpointModel } from './model';
import { canCheckpoint, canResume, canSuspend } from './reduce';
import { ICheckpointInfo, IKernel } from './types';

type Child = Node | string | null | undefined | false;

/** A DOM element; text is always set as text, never parsed as HTML. */
function h(
  tag: string,
  props: Record<string, string> = {},
  ...children: Child[]
): HTMLElement {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    element.setAttribute(key, value);
  }
  for (const child of children) {
    if (child) {
      element.append(child);
    }
  }
  return element;
}

export class GPUCheckpointPanel extends Widget {
  constructor(options: GPUCheckpointPanel.IOptions) {
    super();
    this._model = options.model;
    this._commands = options.commands;
    this._sessions = options.sessions;
    this._trans = options.trans;
    this.id = 'jupyter-gpuckpt-panel';
    this.addClass('jp-gpuckpt-panel');
    this.title.icon = gpuckptIcon;
    this.title.caption = this._trans.__('GPU kernels');
    this._model.changed.connect(this.update, this);
    this._sessions?.runningChanged.connect(this.update, this);
    this._commands.commandChanged.connect(this.update, this);
    this._timer = window.setInterval(
      () => this.isVisible && this.update(),
      options.tick ?? 10_000
    );
  }

  dispose(): void {
    window.clearInterval(this._timer);
    super.dispose();
  }

  protected onAfterShow(): void {
    void this._model.refresh();
  }

  protected onUpdateRequest(): void {
    const trans = this._trans;
    const now = Date.now();
    const kernels = [...this._model.kernels.values()];
    const rows = kernels.map(k => this._kernelRow(k, now));
    const body = h(
      'div',
      { class: 'jp-gpuckpt-panel-body' },
      h('h2', {}, trans.__('GPU kernels')),
      this._model.error &&
        h(
          'p',
          { class: 'jp-gpuckpt-error' },
          trans.__('Could not reach the server: %1', this._model.error)
        ),
      kernels.length
        ? h(
            'table',
            { class: 'jp-gpuckpt-kernels' },
            h(
              'thead',
              {},
              h(
                'tr',
                {},
                ...[
                  trans.__('Notebook'),
                  trans.__('State'),
                  trans.__('GPUs'),
                  trans.__('Idle'),
                  trans.__('Last checkpoint')
                ].map(t => h('th', {}, t))
              )
            ),
            h('tbody', {}, ...rows.flat())
          )
        : h(
            'p',
            { class: 'jp-gpuckpt-empty' },
            trans.__('No kernels are running.')
          ),
      h(
        'h2',
        {},
        this._model.node
          ? trans.__('GPUs on %1', this._model.node)
          : trans.__('GPUs')
      ),
      this._gpuTable()
    );
    this.node.replaceChildren(body);
  }

  private _notebookOf(kernelId: string): string {
    for (const session of this._sessions?.running() ?? []) {
      if (session.kernel?.id === kernelId) {
        return session.path;
      }
    }
    return kernelId.slice(0, 8);
  }

  private _kernelRow(kernel: IKernel, now: number): HTMLElement[] {
    const trans = this._trans;
    const checkpoint = kernel.last_checkpoint;
    const age = checkpointAge(kernel, now);
    const idle = idleSeconds(kernel, now);
    const row = h(
      'tr',
      {
        class: 'jp-gpuckpt-kernel',
        'data-kernel-id': kernel.id,
        'data-state': kernel.state
      },
      h(
        'td',
        { class: 'jp-gpuckpt-notebook', title: kernel.id },
        this._notebookOf(kernel.id)
      ),
      h('td', { class: 'jp-gpuckpt-state' }, formatState(kernel, trans)),
      h(
        'td',
        {},
        kernel.state === 'suspended'
          ? trans.__('released')
          : formatGpus(kernel.gpus, trans)
      ),
      h(
        'td',
        {},
        idle === null || kernel.state !== 'running' ? '–' : formatDuration(idle)
      ),
      h(
        'td',
        {},
        checkpoint
          ? trans.__(
              '%1 ago, %2',
              formatDuration(age),
              formatBytes(checkpoint.bytes_total)
            )
          : trans.__('none')
      )
    );
    const args = { kernelId: kernel.id };
    const actions = h(
      'div',
      { class: 'jp-gpuckpt-actions' },
      this._button(trans.__('Checkpoint now'), canCheckpoint(kernel), () =>
        this._commands.execute(CommandIDs.checkpoint, args)
      ),
      kernel.suspendable &&
        this._button(trans.__('Suspend'), canSuspend(kernel), () =>
          this._commands.execute(CommandIDs.suspend, args)
        ),
      kernel.suspendable &&
        this._button(trans.__('Resume'), canResume(kernel), () =>
          this._commands.execute(CommandIDs.resume, args)
        ),
      this._button(
        this._expanded.has(kernel.id)
          ? trans.__('Hide checkpoints')
          : trans.__('Checkpoints…'),
        true,
        () => this._toggleCheckpoints(kernel.id)
      )
    );
    const extra = h(
      'td',
      { colspan: '5' },
      actions,
      kernel.last_error &&
        h('div', { class: 'jp-gpuckpt-error' }, kernel.last_error),
      kernel.notice && h('div', { class: 'jp-gpuckpt-notice' }, kernel.notice),
      this._expanded.has(kernel.id) && this._checkpointList(kernel.id)
    );
    return [row, h('tr', { class: 'jp-gpuckpt-kernel-extra' }, extra)];
  }

  private _checkpointList(kernelId: string): HTMLElement {
    const trans = this._trans;
    const list = this._checkpoints.get(kernelId);
    if (list === undefined) {
      return h('div', {}, trans.__('Loading…'));
    }
    if (!list.length) {
      return h('div', {}, trans.__('No checkpoints.'));
    }
    return h(
      'ul',
      { class: 'jp-gpuckpt-checkpoints' },
      ...list.map(c =>
        h(
          'li',
          {},
          h('code', {}, c.id.slice(0, 12)),
          ` ${c.created ?? ''} · ${formatBytes(c.nbytes)} · ${trans.__('%1 variables', c.variables)}`,
          c.skipped ? ` (${trans.__('%1 skipped', c.skipped)})` : '',
          c.problem ? ` · ${c.problem}` : '',
          ' ',
          this._button(trans.__('Delete'), true, async () => {
            if (
              await this._commands.execute(CommandIDs.deleteCheckpoint, {
                checkpointId: c.id
              })
            ) {
              await this._loadCheckpoints(kernelId);
            }
          })
        )
      )
    );
  }

  private _toggleCheckpoints(kernelId: string): void {
    if (this._expanded.delete(kernelId)) {
      this.update();
      return;
    }
    this._expanded.add(kernelId);
    this.update();
    void this._loadCheckpoints(kernelId);
  }

  private async _loadCheckpoints(kernelId: string): Promise<void> {
    try {
      this._checkpoints.set(
        kernelId,
        await GPUCheckpointAPI.checkpoints(kernelId, this._model.serverSettings)
      );
    } catch (error) {
      this._checkpoints.set(kernelId, []);
    }
    this.update();
  }

  private _gpuTable(): HTMLElement {
    const trans = this._trans;
    const gpus = this._model.gpus;
    if (!gpus.length) {
      return h(
        'p',
        { class: 'jp-gpuckpt-empty' },
        trans.__('This server has no GPUs that NVML can see.')
      );
    }
    return h(
      'table',
      { class: 'jp-gpuckpt-gpus' },
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          ...[
            '#',
            trans.__('GPU'),
            trans.__('Memory'),
            trans.__('Use'),
            trans.__('Held by')
          ].map(t => h('th', {}, t))
        )
      ),
      h(
        'tbody',
        {},
        ...gpus.map(g =>
          h(
            'tr',
            {},
            h('td', {}, String(g.index ?? '')),
            h('td', { title: g.uuid }, g.name),
            h(
              'td',
              {},
              `${formatBytes(g.memory_used)} / ${formatBytes(g.memory_total)}`
            ),
            h('td', {}, `${g.utilization}%`),
            h(
              'td',
              {},
              g.kernel_id ? this._notebookOf(g.kernel_id) : trans.__('free')
            )
          )
        )
      )
    );
  }

  private _button(
    label: string,
    enabled: boolean,
    onClick: () => unknown
  ): HTMLElement {
    const button = h(
      'button',
      { class: 'jp-gpuckpt-button jp-mod-styled', type: 'button' },
      label
    );
    (button as HTMLButtonElement).disabled = !enabled;
    button.addEventListener('click', () => void onClick());
    return button;
  }

  private _model: GPUCheckpointModel;
  private _commands: CommandRegistry;
  private _sessions: Session.IManager | null;
  private _trans: TranslationBundle;
  private _timer: number;
  private _expanded = new Set<string>();
  private _checkpoints = new Map<string, ICheckpointInfo[]>();
}

export namespace GPUCheckpointPanel {
  export interface IOptions {
    model: GPUCheckpointModel;
    commands: CommandRegistry;
    sessions: Session.IManager | null;
    trans: TranslationBundle;
    /** Milliseconds between re-renders of the ages while visible (10 s). */
    tick?: number;
  }
}
