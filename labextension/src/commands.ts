/**
 * Commands: suspend, park, resume, checkpoint, keep running, delete a checkpoint, open the
 * panel; each acts on `args.kernelId` or else on the current notebook's kernel.
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
import { canKeep, dueIn } from './policy';
import {
  canCheckpoint,
  canPark,
  canRebuild,
  canResume,
  canSuspend,
  rebuildOffer
} from './reduce';
import { IActionResult, ReleaseMode } from './types';

export namespace CommandIDs {
  /** Suspend: checkpoint, then end the kernel's process. */
  export const suspend = 'jupyter-gpuckpt:suspend';
  /** Park: checkpoint, then the CUDA driver moves its GPU memory to host memory. */
  export const park = 'jupyter-gpuckpt:park';
  /** Resume a suspended kernel, or unpark a parked one. */
  export const resume = 'jupyter-gpuckpt:resume';
  export const checkpoint = 'jupyter-gpuckpt:checkpoint';
  /**
   * Keep running: counts as the user's activity, so a suspend the policy warned of is off
   * and the idle time starts again.
   */
  export const keep = 'jupyter-gpuckpt:keep-running';
  /** Re-run the cells that rebuild what the last restore could not bring back. */
  export const rebuild = 'jupyter-gpuckpt:rebuild';
  /**
   * The notebook toolbar's button: release a running kernel's GPUs as the server's
   * `release_mode` says (park where it can, else suspend), resume a suspended or parked one.
   */
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
    action: KernelAction,
    mode?: ReleaseMode
  ): Promise<IActionResult | undefined> => {
    if (!kernelId) {
      return undefined;
    }
    let result: IActionResult;
    try {
      result = await model.act(kernelId, action, { wait: true, mode });
    } catch (error) {
      Notification.error(
        trans.__(
          'Could not %1 the kernel: %2',
          mode === 'park' ? trans.__('park') : trans.__(action),
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

  /** What the confirmation asks, by how the GPUs are to be freed. */
  const confirmations: Record<
    ReleaseMode | 'default',
    [string, string, string]
  > = {
    suspend: [
      trans.__('Suspend kernel?'),
      trans.__(
        'The kernel state is saved and its process ends, releasing its GPU. Running a cell resumes it.'
      ),
      trans.__('Suspend')
    ],
    park: [
      trans.__('Park kernel?'),
      trans.__(
        'The kernel state is saved, then the CUDA driver moves its GPU memory into host memory and its GPU is released; its process keeps running. Where the driver cannot park it, it is suspended instead. Running a cell resumes it.'
      ),
      trans.__('Park')
    ],
    default: [
      trans.__('Suspend kernel?'),
      trans.__(
        'The kernel state is saved and its GPU is released: parked where the CUDA driver can, else suspended. Running a cell resumes it.'
      ),
      trans.__('Suspend')
    ]
  };

  /** Free the kernel's GPUs: park, suspend, or (no mode) as the server is set up. */
  const release = async (
    args: ReadonlyPartialJSONObject,
    mode?: ReleaseMode
  ): Promise<void> => {
    const kernelId = kernelIdOf(args);
    if (options.confirmSuspend()) {
      const [title, body, label] = confirmations[mode ?? 'default'];
      const answer = await showDialog({
        title,
        body,
        buttons: [Dialog.cancelButton(), Dialog.warnButton({ label })]
      });
      if (!answer.button.accept) {
        return;
      }
    }
    await run(kernelId, 'suspend', mode);
  };

  commands.addCommand(CommandIDs.suspend, {
    label: trans.__('Suspend kernel (release GPU)'),
    caption: trans.__(
      'Save the kernel state, end its process and release its GPUs'
    ),
    isEnabled: args => canSuspend(kernelOf(args)),
    execute: args => release(args, 'suspend')
  });
  commands.addCommand(CommandIDs.park, {
    label: trans.__('Park GPU kernel'),
    caption: trans.__(
      'Free the GPU and keep the process: the CUDA driver holds its GPU memory in host memory; falls back to suspend where the driver cannot'
    ),
    isEnabled: args => canPark(kernelOf(args)),
    execute: args => release(args, 'park')
  });
  commands.addCommand(CommandIDs.resume, {
    label: trans.__('Resume kernel'),
    caption: trans.__(
      'Restore a suspended kernel from its checkpoint, or give a parked kernel its GPU memory back'
    ),
    isEnabled: args => canResume(kernelOf(args)),
    execute: args => run(kernelIdOf(args), 'resume')
  });
  commands.addCommand(CommandIDs.checkpoint, {
    label: trans.__('Checkpoint kernel now'),
    caption: trans.__('Save the kernel state; the kernel keeps running'),
    isEnabled: args => canCheckpoint(kernelOf(args)),
    execute: args => run(kernelIdOf(args), 'checkpoint')
  });
  commands.addCommand(CommandIDs.keep, {
    label: trans.__('Keep kernel running'),
    caption: args => {
      const due = dueIn(kernelOf(args), Date.now());
      return due === null
        ? trans.__(
            'Count this as activity: the idle time starts again, so the policy does not suspend the kernel now'
          )
        : trans.__(
            'The policy suspends this kernel soon: count this as activity, so it keeps running'
          );
    },
    isEnabled: args => canKeep(kernelOf(args)),
    execute: async args => {
      const kernelId = kernelIdOf(args);
      if (!kernelId) {
        return;
      }
      try {
        await model.keep(kernelId);
      } catch (error) {
        Notification.error(
          trans.__(
            '%1: could not keep the kernel running: %2',
            nameOf(kernelId),
            (error as Error).message
          ),
          { autoClose: false }
        );
        return;
      }
      Notification.success(trans.__('%1: kept running.', nameOf(kernelId)), {
        autoClose: 5000
      });
    }
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
        : trans.__(
            'Release the GPU: park the kernel where the CUDA driver can, else suspend it'
          ),
    icon: gpuckptIcon,
    isEnabled: args => canSuspend(kernelOf(args)) || canResume(kernelOf(args)),
    execute: args =>
      canResume(kernelOf(args))
        ? run(kernelIdOf(args), 'resume')
        : release(args)
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
