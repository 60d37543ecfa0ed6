/**
 * jupyter-gpuckpt's JupyterLab plugins: the model, the commands (palette here; the
 * notebook toolbar button and Kernel menu entries come from schema/commands.json, so users
 * can move or hide them in Settings), the status bar item, the side panel, the
 * notifications, and the return signal (resume before the user asks).
 */
import {
  ILabShell,
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  CommandToolbarButton,
  ICommandPalette,
  IToolbarWidgetRegistry
} from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import {
  ITranslator,
  nullTranslator,
  TranslationBundle
} from '@jupyterlab/translation';
import { Signal } from '@lumino/signaling';
import { addCommands, CommandIDs } from './commands';
import { GPUCheckpointModel, IGPUCheckpointModel } from './model';
import { GPUCheckpointNotifier, NotificationDetail } from './notifications';
import { GPUCheckpointPanel } from './panel';
import { ReturnWatcher } from './returns';
import { GPUCheckpointStatus } from './status';

export { CommandIDs };

const DOMAIN = 'jupyter_gpuckpt';

/** The notebook toolbar item's name in schema/commands.json. */
const TOOLBAR_ITEM = 'gpuckpt-suspend-resume';

function translate(translator: ITranslator | null): TranslationBundle {
  return (translator ?? nullTranslator).load(DOMAIN);
}

/** Load a plugin's settings and follow them; `apply` runs now and on each change. */
function followSettings(
  registry: ISettingRegistry | null,
  pluginId: string,
  apply: (settings: ISettingRegistry.ISettings) => void
): void {
  if (!registry) {
    return;
  }
  registry
    .load(pluginId)
    .then(settings => {
      apply(settings);
      settings.changed.connect(apply);
    })
    .catch(reason =>
      console.error(`jupyter-gpuckpt: cannot load ${pluginId} settings`, reason)
    );
}

/**
 * The model: kernels and GPUs from one REST fetch at start, one after each event that is
 * not progress, and one when a notebook gets a new kernel.
 */
const modelPlugin: JupyterFrontEndPlugin<GPUCheckpointModel> = {
  id: 'jupyter-gpuckpt:model',
  description:
    'Keeps the checkpointable kernels and GPUs up to date from the event stream.',
  autoStart: true,
  provides: IGPUCheckpointModel,
  optional: [INotebookTracker],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker | null) => {
    const { serviceManager } = app;
    const model = new GPUCheckpointModel({
      serverSettings: serviceManager.serverSettings,
      events: serviceManager.events ?? null
    });
    tracker?.widgetAdded.connect((_, panel: NotebookPanel) => {
      const context = panel.sessionContext;
      // a new kernel is news to the server's list; a restarted one may have changed
      context.kernelChanged.connect(() => void model.refresh());
      context.statusChanged.connect((_, status) => {
        if (status === 'busy' || status === 'idle') {
          // a cell ran: its idle time restarts here, without asking the server
          model.markActivity(context.session?.kernel?.id);
        } else if (status === 'restarting') {
          void model.refresh();
        }
      });
    });
    app.restored
      .then(() => model.refresh())
      .catch(reason =>
        console.error('jupyter-gpuckpt: first fetch failed', reason)
      );
    return model;
  }
};

/**
 * Suspend, park, resume, checkpoint and rebuild: the commands and their palette entries. Their
 * notebook toolbar button and Kernel menu entries are declared in this plugin's settings
 * schema (`jupyter.lab.toolbars`, `jupyter.lab.menus`).
 */
const commandsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-gpuckpt:commands',
  description:
    'Suspend, park and resume commands in the notebook toolbar, Kernel menu and palette.',
  autoStart: true,
  requires: [IGPUCheckpointModel],
  optional: [
    INotebookTracker,
    ICommandPalette,
    IToolbarWidgetRegistry,
    ISettingRegistry,
    ITranslator
  ],
  activate: (
    app: JupyterFrontEnd,
    model: GPUCheckpointModel,
    tracker: INotebookTracker | null,
    palette: ICommandPalette | null,
    toolbarRegistry: IToolbarWidgetRegistry | null,
    settings: ISettingRegistry | null,
    translator: ITranslator | null
  ) => {
    const trans = translate(translator);
    let confirmSuspend = false;
    followSettings(settings, commandsPlugin.id, s => {
      confirmSuspend = s.get('confirmSuspend').composite as boolean;
    });
    addCommands(app, {
      model,
      tracker,
      trans,
      confirmSuspend: () => confirmSuspend
    });

    const category = trans.__('GPU Checkpoint');
    for (const command of [
      CommandIDs.suspend,
      CommandIDs.park,
      CommandIDs.resume,
      CommandIDs.keep,
      CommandIDs.checkpoint,
      CommandIDs.rebuild,
      CommandIDs.refresh
    ]) {
      palette?.addItem({ command, category });
    }
    // The schema places the toolbar item; this factory makes it show the command's label
    // ('Suspend' / 'Resume') beside its icon, which JupyterLab's default factory leaves
    // out for commands with an icon.
    toolbarRegistry?.addFactory('Notebook', TOOLBAR_ITEM, () => {
      const button = new CommandToolbarButton({
        commands: app.commands,
        id: CommandIDs.toggle,
        args: { toolbar: true }
      });
      button.addClass('jp-gpuckpt-toolbar-button');
      return button;
    });
  }
};

/**
 * The status bar item of the current notebook's kernel.
 */
const statusPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-gpuckpt:status',
  description:
    "The current notebook kernel's state, GPUs, idle time and last checkpoint.",
  autoStart: true,
  requires: [IGPUCheckpointModel],
  optional: [IStatusBar, INotebookTracker, ISettingRegistry, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    model: GPUCheckpointModel,
    statusBar: IStatusBar | null,
    tracker: INotebookTracker | null,
    settings: ISettingRegistry | null,
    translator: ITranslator | null
  ) => {
    if (!statusBar || !tracker) {
      return;
    }
    const trans = translate(translator);
    let show = true;
    const activeStateChanged = new Signal<unknown, void>(model);
    followSettings(settings, statusPlugin.id, s => {
      show = s.get('showStatusItem').composite as boolean;
      activeStateChanged.emit();
    });
    tracker.currentChanged.connect(() => activeStateChanged.emit());
    const item = new GPUCheckpointStatus({
      model,
      tracker,
      trans,
      onClick: () => {
        if (app.commands.hasCommand(CommandIDs.openPanel)) {
          void app.commands.execute(CommandIDs.openPanel);
        }
      }
    });
    statusBar.registerStatusItem(statusPlugin.id, {
      item,
      align: 'left',
      rank: 5,
      isActive: () => show && tracker.currentWidget !== null,
      activeStateChanged
    });
  }
};

/**
 * The side panel with the user's kernels and the server's GPUs.
 */
const panelPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-gpuckpt:panel',
  description:
    'A side panel listing kernels, their checkpoints and the GPUs of the server.',
  autoStart: true,
  requires: [IGPUCheckpointModel],
  optional: [ILabShell, ILayoutRestorer, ICommandPalette, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    model: GPUCheckpointModel,
    labShell: ILabShell | null,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    translator: ITranslator | null
  ) => {
    const trans = translate(translator);
    const panel = new GPUCheckpointPanel({
      model,
      commands: app.commands,
      sessions: app.serviceManager.sessions,
      trans
    });
    app.shell.add(panel, 'right', { rank: 900 });
    restorer?.add(panel, panel.id);
    app.commands.addCommand(CommandIDs.openPanel, {
      label: trans.__('Show GPU kernels panel'),
      execute: () => {
        labShell?.expandRight();
        app.shell.activateById(panel.id);
      }
    });
    palette?.addItem({
      command: CommandIDs.openPanel,
      category: trans.__('GPU Checkpoint')
    });
  }
};

/**
 * Progress notifications and notices, and warnings of a coming policy suspend with a
 * "Keep running" button for the notebooks open here.
 */
const notificationsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-gpuckpt:notifications',
  description:
    'Checkpoint and restore progress, policy suspends and their warnings, restores after failure, skipped variables.',
  autoStart: true,
  requires: [IGPUCheckpointModel],
  optional: [ISettingRegistry, ITranslator, INotebookTracker],
  activate: (
    app: JupyterFrontEnd,
    model: GPUCheckpointModel,
    settings: ISettingRegistry | null,
    translator: ITranslator | null,
    tracker: INotebookTracker | null
  ) => {
    const notifier = new GPUCheckpointNotifier({
      model,
      sessions: app.serviceManager.sessions,
      tracker,
      trans: translate(translator)
    });
    followSettings(settings, notificationsPlugin.id, s => {
      notifier.detail = s.get('detail').composite as NotificationDetail;
    });
  }
};

/**
 * Resume before the user asks: a suspended or parked kernel's notebook coming back into view,
 * focus or typing tells the server, which resumes it (its `resume_on_return` policy).
 */
const returnsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-gpuckpt:returns',
  description:
    "Tells the server when the user comes back to a suspended kernel's notebook, so it resumes before a cell is run.",
  autoStart: true,
  requires: [IGPUCheckpointModel],
  optional: [INotebookTracker],
  activate: (
    _: JupyterFrontEnd,
    model: GPUCheckpointModel,
    tracker: INotebookTracker | null
  ) => {
    if (tracker) {
      new ReturnWatcher({ model, tracker });
    }
  }
};

const plugins: JupyterFrontEndPlugin<any>[] = [
  modelPlugin,
  returnsPlugin,
  commandsPlugin,
  statusPlugin,
  panelPlugin,
  notificationsPlugin
];

export default plugins;
