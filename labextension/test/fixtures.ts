/** What the unit tests share: a translator that fills `%1` ..., and a kernel model. */
import { IKernel, ITrans } from '../src/types';

/** Like TranslationBundle.__ with the null translator: %1, %2... replaced. */
export const trans: ITrans = {
  __: (msgid: string, ...args: any[]) =>
    msgid.replace(/%(\d)/g, (_, i: string) => String(args[Number(i) - 1]))
};

/** A running, checkpointable kernel with no GPU and no checkpoint, changed by `overrides`. */
export function kernelModel(overrides: Partial<IKernel> = {}): IKernel {
  return {
    id: 'k1',
    state: 'running',
    progress: null,
    idle_seconds: 30,
    gpus: [],
    last_checkpoint: null,
    last_error: null,
    notice: null,
    suspendable: true,
    received_at: 0,
    ...overrides
  };
}
