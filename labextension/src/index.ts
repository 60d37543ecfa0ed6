/**
 * jupyter-gpuckpt's JupyterLab plugins: the model, the commands (toolbar, Kernel menu,
 * palette), the status bar item, the side panel and the notifications.
 */
import {
  ILabShell,
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { CommandToolbarButton, ICommandPalette } from '@jupyterlab/apputils';
import { IMainMenu } from '@jupyterlab/mainmenu';
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
import { GPUCheckpointStatus } from './status';

export { CommandIDs };

const DOMAIN = 'jupyter_gpuckpt';

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
 * The model: kernels and GPUs from one REST fetch at start and one after each event.
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
    // a notebook that gets a new kernel, or whose kernel went idle (idle time restarts)
    tracker?.widgetAdded.connect((_, panel: NotebookPanel) => {
      const context = panel.sessionContext;
      context.kernelChanged.connect(() => void model.refresh());
      context.statusChanged.connect((_, status) => {
        if (status === 'idle' || status === 'restarting') {
          void model.refresh();
        }
      });
    });
    void app.restored.then(() => model.refresh());
    return model;
  }
};

/**
 * Suspend, resume and checkpoint: notebook toolbar button, Kernel menu, command palette.
 */
const commandsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-gpuckpt:commands',
  description:
    'Suspend and resume commands in the notebook toolbar, Kernel menu and palette.',
  autoStart: true,
  requires: [IGPUCheckpointModel],
  optional: [
    INotebookTracker,
    ICommandPalette,
    IMainMenu,
    ISettingRegistry,
    ITranslator
  ],
  activate: (
    app: JupyterFrontEnd,
    model: GPUCheckpointModel,
    tracker: INotebookTracker | null,
    palette: ICommandPalette | null,
    mainMenu: IMainMenu | null,
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
      CommandIDs.resume,
      CommandIDs.checkpoint,
      CommandIDs.refresh
    ]) {
      palette?.addItem({ command, category });
    }
    mainMenu?.kernelMenu.addGroup(
      [
        { command: CommandIDs.suspend },
        { command: CommandIDs.resume },
        { command: CommandIDs.checkpoint }
      ],
      50
    );
    app.docRegistry.addWidgetExtension('Notebook', {
      createNew: (panel: NotebookPanel) => {
        const button = new CommandToolbarButton({
          commands: app.commands,
          id: CommandIDs.toggle
        });
        button.addClass('jp-gpuckpt-toolbar-button');
        panel.toolbar.insertAfter('cellType', 'gpuckpt-suspend-resume', button);
        return button;
      }
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
 * Progress notifications and notices.
 */
const notificationsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-gpuckpt:notifications',
  description:
    'Checkpoint and restore progress, policy suspends, restores after failure, skipped variables.',
  autoStart: true,
  requires: [IGPUCheckpointModel],
  optional: [ISettingRegistry, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    model: GPUCheckpointModel,
    settings: ISettingRegistry | null,
    translator: ITranslator | null
  ) => {
    const notifier = new GPUCheckpointNotifier({
      model,
      sessions: app.serviceManager.sessions,
      trans: translate(translator)
    });
    followSettings(settings, notificationsPlugin.id, s => {
      notifier.detail = s.get('detail').composite as NotificationDetail;
    });
  }
};

const plugins: JupyterFrontEndPlugin<any>[] = [
  modelPlugin,
  commandsPlugin,
  statusPlugin,
  panelPlugin,
  notificationsPlugin
];

export default plugins;
