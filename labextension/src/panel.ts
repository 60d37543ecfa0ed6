/**
 * The side panel: a card per kernel (card.ts) with its state, GPUs, idle time, last
 * checkpoint, actions and restore report, and the server's GPUs with who holds them.
 *
 * Built for a narrow sidebar and updated in place: the cards and GPU rows are keyed by
 * kernel id and GPU uuid, made once, and each update changes only the text, attributes
 * and buttons whose data changed.
 */
import { Session } from '@jupyterlab/services';
import { TranslationBundle } from '@jupyterlab/translation';
import { refreshIcon } from '@jupyterlab/ui-components';
import { CommandRegistry } from '@lumino/commands';
import { Widget } from '@lumino/widgets';
import { KernelCard } from './card';
import { CommandIDs } from './commands';
import { baseName } from './format';
import { h, iconButton, setHidden, setText, syncChildren } from './dom';
import { GpuList } from './gpulist';
import { GPUCheckpointAPI } from './handler';
import { gpuckptIcon } from './icon';
import { GPUCheckpointModel } from './model';
import { ICheckpointInfo } from './types';
import { kernelCardView } from './view';

export class GPUCheckpointPanel extends Widget {
  constructor(options: GPUCheckpointPanel.IOptions) {
    super();
    this._model = options.model;
    this._commands = options.commands;
    this._sessions = options.sessions;
    const trans = (this._trans = options.trans);
    this.id = 'jupyter-gpuckpt-panel';
    this.addClass('jp-gpuckpt-panel');
    this.title.icon = gpuckptIcon;
    this.title.caption = trans.__('GPU kernels');

    this._error = h('p', { class: 'jp-gpuckpt-error' });
    this._kernelList = h('ul', {
      class: 'jp-gpuckpt-kernels',
      'aria-label': trans.__('GPU kernels')
    });
    this._noKernels = h(
      'p',
      { class: 'jp-gpuckpt-empty' },
      trans.__('No kernels are running.')
    );
    this._gpuTitle = h('h2', {});
    this._gpuList = new GpuList(trans);
    this._noGpus = h(
      'p',
      { class: 'jp-gpuckpt-empty' },
      trans.__('This server has no GPUs that NVML can see.')
    );
    this.node.append(
      h(
        'div',
        { class: 'jp-gpuckpt-panel-body' },
        h(
          'div',
          { class: 'jp-gpuckpt-panel-head' },
          h('h2', {}, trans.__('GPU kernels')),
          iconButton(refreshIcon, trans.__('Refresh GPU kernels'), () =>
            this._commands.execute(CommandIDs.refresh)
          )
        ),
        this._error,
        this._kernelList,
        this._noKernels,
        this._gpuTitle,
        this._gpuList.node,
        this._noGpus
      )
    );

    this._model.changed.connect(this.update, this);
    this._sessions?.runningChanged.connect(this.update, this);
    this._timer = window.setInterval(
      () => this.isVisible && this.update(),
      options.tick ?? 10_000
    );
    this.update();
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
    const model = this._model;
    setText(
      this._error,
      model.error
        ? trans.__('Could not reach the server: %1', model.error)
        : null
    );

    const paths = this._paths();
    const cards: HTMLElement[] = [];
    for (const kernel of model.kernels.values()) {
      const card = this._cards.get(kernel.id) ?? this._newCard(kernel.id);
      card.update(
        kernelCardView(kernel, paths.get(kernel.id) ?? null, now, trans)
      );
      cards.push(card.node);
    }
    for (const id of this._cards.keys()) {
      if (!model.kernels.has(id)) {
        this._cards.delete(id);
        this._expanded.delete(id);
      }
    }
    syncChildren(this._kernelList, cards);
    setHidden(this._noKernels, cards.length > 0);

    setText(
      this._gpuTitle,
      model.node ? trans.__('GPUs on %1', model.node) : trans.__('GPUs')
    );
    this._gpuList.update(model.gpus, kernelId => {
      const path = paths.get(kernelId);
      return path
        ? baseName(path)
        : trans.__('kernel %1', kernelId.slice(0, 8));
    });
    setHidden(this._noGpus, model.gpus.length > 0);
  }

  /** Notebook paths by kernel id, from this browser's sessions. */
  private _paths(): Map<string, string> {
    const paths = new Map<string, string>();
    for (const session of this._sessions?.running() ?? []) {
      if (session.kernel?.id) {
        paths.set(session.kernel.id, session.path);
      }
    }
    return paths;
  }

  private _newCard(kernelId: string): KernelCard {
    const args = { kernelId };
    const run = (command: string) => this._commands.execute(command, args);
    const card: KernelCard = new KernelCard(
      kernelId,
      {
        checkpoint: () => run(CommandIDs.checkpoint),
        suspend: () => run(CommandIDs.suspend),
        park: () => run(CommandIDs.park),
        resume: () => run(CommandIDs.resume),
        rebuild: async () => {
          card.rebuilding = true;
          try {
            await run(CommandIDs.rebuild);
          } finally {
            card.rebuilding = false;
            this.update();
          }
        },
        keep: async () => {
          card.keeping = true;
          try {
            await run(CommandIDs.keep);
          } finally {
            card.keeping = false;
            this.update();
          }
        },
        toggleCheckpoints: () => this._toggleCheckpoints(kernelId),
        deleteCheckpoint: async id => {
          if (
            await this._commands.execute(CommandIDs.deleteCheckpoint, {
              checkpointId: id
            })
          ) {
            await this._loadCheckpoints(kernelId);
          }
        }
      },
      this._trans
    );
    this._cards.set(kernelId, card);
    return card;
  }

  private _toggleCheckpoints(kernelId: string): void {
    const card = this._cards.get(kernelId);
    if (this._expanded.has(kernelId)) {
      this._expanded.delete(kernelId);
      card?.showCheckpoints(null);
      return;
    }
    this._expanded.add(kernelId);
    card?.showCheckpoints(undefined);
    void this._loadCheckpoints(kernelId);
  }

  private async _loadCheckpoints(kernelId: string): Promise<void> {
    let list: ICheckpointInfo[];
    try {
      list = await GPUCheckpointAPI.checkpoints(
        kernelId,
        this._model.serverSettings
      );
    } catch (error) {
      console.error('jupyter-gpuckpt: cannot list checkpoints', error);
      list = [];
    }
    if (this._expanded.has(kernelId)) {
      this._cards.get(kernelId)?.showCheckpoints(list);
    }
  }

  private _model: GPUCheckpointModel;
  private _commands: CommandRegistry;
  private _sessions: Session.IManager | null;
  private _trans: TranslationBundle;
  private _timer: number;
  private _error: HTMLElement;
  private _kernelList: HTMLElement;
  private _noKernels: HTMLElement;
  private _gpuTitle: HTMLElement;
  private _gpuList: GpuList;
  private _noGpus: HTMLElement;
  private _cards = new Map<string, KernelCard>();
  /** Kernels whose checkpoint list is open. */
  private _expanded = new Set<string>();
}

export namespace GPUCheckpointPanel {
  export interface IOptions {
    model: GPUCheckpointModel;
    commands: CommandRegistry;
    sessions: Session.IManager | null;
    trans: TranslationBundle;
    /** Milliseconds between updates of the ages while visible (10 s). */
    tick?: number;
  }
}
