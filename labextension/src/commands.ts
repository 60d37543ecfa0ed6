/**
 * Commands: suspend, resume, checkpoint, delete a checkpoint, open the panel; each
 * acts on `args.kernelId` or else on the current notebook's kernel.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';
import { TranslationBundle } from '@jupyterlab/translation';
import { ReadonlyPartialJSONObject } from '@lumino/coreutils';
import { baseName, outcomeText } from './format';
import { KernelAction, GPUCheckpointAPI } from './handler';
import { gpuckptIcon } from './icon';
import { GPUCheckpointModel } from './model';
import {
  canCheckpoint,
  canRebuild,
  canResume,
  canSuspend,
  rebuildOffer
} from './reduce';
import { IActionResult } from './types';

export namespace CommandIDs {
  export const suspend = 'jupyter-gpuckpt:suspend';
  export const resume = 'jupyter-gpuckpt:resume';
  export const checkpoint = 'jupyter-gpuckpt:checkpoint';
  /** Re-run the cells that rebuild what the last restore could not bring back. */
  export const rebuild = 'jupyter-gpuckpt:rebuild';
  /** The notebook toolbar's button: suspend a running kernel, resume a suspended one. */
  export const toggle = 'jupyter-gpuckpt:suspend-or-resume';
  export const deleteCheckpoint = 'jupyter-gpuckpt:delete-checkpoint';
  export const openPanel = 'jupyter-gpuckpt:open-panel';
  export const refresh = 'jupyter-gpuckpt:refresh';
}

/** The kernel id of the current notebook, if it has one. */
export function currentKernelId(
  tracker: INotebookTracker | null
): string | undefined {
  return tracker?.currentWidget?.sessionContext.session?.kernel?.id;
}

export namespace Commands {
  export interface IOptions {
    model: GPUCheckpointModel;
    tracker: INotebookTracker | null;
    trans: TranslationBundle;
    /** Ask before suspending. */
    confirmSuspend: () => boolean;
  }
}

/** Register the commands; the caller puts them in menus, palette and toolbars. */
export function addCommands(
  app: JupyterFrontEnd,
  options: Commands.IOptions
): void {
  const { model, tracker, trans } = options;
  const { commands } = app;
  const kernelIdOf = (args: ReadonlyPartialJSONObject): string | undefined =>
    (args.kernelId as string | undefined) ?? currentKernelId(tracker);
  const kernelOf = (args: ReadonlyPartialJSONObject) =>
    model.kernel(kernelIdOf(args));

  const nameOf = (kernelId: string): string => {
    for (const session of app.serviceManager.sessions.running()) {
      if (session.kernel?.id === kernelId) {
        return baseName(session.path);
      }
    }
    return trans.__('kernel %1', kernelId.slice(0, 8));
  };

  /**
   * Run `action` and wait for its end (progress comes as events meanwhile); say so when
   * it found nothing to do, and show the server's message when it failed.
   */
  const run = async (
    kernelId: string | undefined,
    action: KernelAction
  ): Promise<IActionResult | undefined> => {
    if (!kernelId) {
      return undefined;
    }
    let result: IActionResult;
    try {
      result = await model.act(kernelId, action, { wait: true });
    } catch (error) {
      Notification.error(
        trans.__(
          'Could not %1 the kernel: %2',
          trans.__(action),
          (error as Error).message
        ),
        { autoClose: false }
      );
      return undefined;
    }
    const noop = outcomeText(result.outcome, nameOf(kernelId), trans);
    if (noop) {
      Notification.info(noop, { autoClose: 5000 });
    }
    return result;
  };

  const rebuild = async (kernelId: string | undefined): Promise<void> => {
    const rebuilt = (await run(kernelId, 'rebuild'))?.rebuilt;
    if (!rebuilt || !kernelId) {
      return;
    }
    const text = `${nameOf(kernelId)}: ${rebuilt.text}`;
    if (rebuilt.failed || rebuilt.missing.length) {
      Notification.warning(text, { autoClose: false });
    } else {
      Notification.success(text, { autoClose: 5000 });
    }
  };

  const suspend = async (args: ReadonlyPartialJSONObject): Promise<void> => {
    const kernelId = kernelIdOf(args);
    if (options.confirmSuspend()) {
      const answer = await showDialog({
        title: trans.__('Suspend kernel?'),
        body: trans.__(
          'The kernel state is saved and its process ends, releasing its GPU. Running a cell resumes it.'
        ),
        buttons: [
          Dialog.cancelButton(),
          Dialog.warnButton({ label: trans.__('Suspend') })
        ]
      });
      if (!answer.button.accept) {
        return;
      }
    }
    await run(kernelId, 'suspend');
  };

  commands.addCommand(CommandIDs.suspend, {
    label: trans.__('Suspend kernel (release GPU)'),
    caption: trans.__(
      'Save the kernel state, end its process and release its GPUs'
    ),
    isEnabled: args => canSuspend(kernelOf(args)),
    execute: suspend
  });
  commands.addCommand(CommandIDs.resume, {
    label: trans.__('Resume kernel'),
    caption: trans.__('Restart the suspended kernel from its checkpoint'),
    isEnabled: args => canResume(kernelOf(args)),
    execute: args => run(kernelIdOf(args), 'resume')
  });
  commands.addCommand(CommandIDs.checkpoint, {
    label: trans.__('Checkpoint kernel now'),
    caption: trans.__('Save the kernel state; the kernel keeps running'),
    isEnabled: args => canCheckpoint(kernelOf(args)),
    execute: args => run(kernelIdOf(args), 'checkpoint')
  });
  commands.addCommand(CommandIDs.rebuild, {
    label: trans.__('Rebuild what the restore did not bring back'),
    caption: trans.__(
      'Re-run, in order, the recorded cells that created the variables the last restore could not bring back'
    ),
    isEnabled: args => canRebuild(kernelOf(args)),
    isVisible: args => rebuildOffer(kernelOf(args)) === 'ask',
    execute: args => rebuild(kernelIdOf(args))
  });
  commands.addCommand(CommandIDs.toggle, {
    label: args =>
      canResume(kernelOf(args)) ? trans.__('Resume') : trans.__('Suspend'),
    caption: args =>
      canResume(kernelOf(args))
        ? trans.__('Resume kernel')
        : trans.__('Suspend kernel (release GPU)'),
    icon: gpuckptIcon,
    isEnabled: args => canSuspend(kernelOf(args)) || canResume(kernelOf(args)),
    execute: args =>
      canResume(kernelOf(args))
        ? run(kernelIdOf(args), 'resume')
        : suspend(args)
  });
  commands.addCommand(CommandIDs.deleteCheckpoint, {
    label: trans.__('Delete checkpoint'),
    isEnabled: args => typeof args.checkpointId === 'string',
    execute: async args => {
      const checkpointId = args.checkpointId as string;
      const answer = await showDialog({
        title: trans.__('Delete checkpoint?'),
        body: trans.__('Checkpoint %1 is deleted for good.', checkpointId),
        buttons: [
          Dialog.cancelButton(),
          Dialog.warnButton({ label: trans.__('Delete') })
        ]
      });
      if (!answer.button.accept) {
        return false;
      }
      try {
        await GPUCheckpointAPI.deleteCheckpoint(
          checkpointId,
          app.serviceManager.serverSettings
        );
      } catch (error) {
        Notification.error(
          trans.__(
            'Could not delete checkpoint %1: %2',
            checkpointId,
            (error as Error).message
          ),
          { autoClose: false }
        );
        return false;
      }
      void model.refresh();
      return true;
    }
  });
  commands.addCommand(CommandIDs.refresh, {
    label: trans.__('Refresh GPU kernels'),
    execute: () => model.refresh()
  });

  // enabled states and the toggle's label follow the model and the current notebook
  const update = () => commands.notifyCommandChanged();
  model.changed.connect(update);
  tracker?.currentChanged.connect(update);
}
