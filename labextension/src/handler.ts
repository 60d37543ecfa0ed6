/**
 * The one way this extension talks to the server: `requestAPI` under /api/gpuckpt/.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import {
  IActionResult,
  ICheckpointInfo,
  IGPUs,
  IKernel,
  IReturnResult,
  ReleaseMode
} from './types';

/**
 * Call the server extension's REST API.
 *
 * @param endPoint path under `/api/gpuckpt/`
 * @param init fetch options
 * @param settings the server connection settings
 * @returns the JSON body, or undefined for an empty answer
 * @throws ServerConnection.NetworkError or ServerConnection.ResponseError
 */
export async function requestAPI<T>(
  endPoint = '',
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<T> {
  const url = URLExt.join(settings.baseUrl, 'api', 'gpuckpt', endPoint);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new ServerConnection.NetworkError(error as TypeError);
  }
  const text = await response.text();
  let data: any = undefined;
  if (text.length > 0) {
    try {
      data = JSON.parse(text);
    } catch {
      data = text;
    }
  }
  if (!response.ok) {
    const message =
      data && typeof data === 'object' && data.message ? data.message : text;
    throw new ServerConnection.ResponseError(response, message);
  }
  return data as T;
}

export type KernelAction = 'checkpoint' | 'suspend' | 'resume' | 'rebuild';

/** The REST calls, by what they do. */
export namespace GPUCheckpointAPI {
  export function kernels(
    settings?: ServerConnection.ISettings
  ): Promise<IKernel[]> {
    return requestAPI<IKernel[]>('kernels', {}, settings);
  }

  export function gpus(settings?: ServerConnection.ISettings): Promise<IGPUs> {
    return requestAPI<IGPUs>('gpus', {}, settings);
  }

  /**
   * Run `action` on a kernel. Without `wait` the server answers at once (`outcome`
   * `started`); with it, when the action ended, with what happened (`done`, `already
   * running`, `already suspended`, `already parked`). Progress comes as events either way.
   *
   * @param mode `suspend` only: park the kernel or end its process; without it, the
   *   server's `release_mode` decides
   */
  export function act(
    kernelId: string,
    action: KernelAction,
    settings?: ServerConnection.ISettings,
    wait = false,
    mode?: ReleaseMode
  ): Promise<IActionResult> {
    const query: Record<string, string> = {};
    if (wait) {
      query.wait = '1';
    }
    if (mode && action === 'suspend') {
      query.mode = mode;
    }
    return requestAPI<IActionResult>(
      `kernels/${encodeURIComponent(kernelId)}/${action}${URLExt.objectToQueryString(query)}`,
      { method: 'POST', body: '{}' },
      settings
    );
  }

  /**
   * The user's "Keep running" on a policy warning: it counts as activity, so the warned
   * suspend is off and the idle time starts again.
   *
   * @returns the kernel's model
   */
  export function keep(
    kernelId: string,
    settings?: ServerConnection.ISettings
  ): Promise<IKernel> {
    return requestAPI<IKernel>(
      `kernels/${encodeURIComponent(kernelId)}/keep`,
      { method: 'POST', body: '{}' },
      settings
    );
  }

  /**
   * The user came back to the kernel's notebook (its tab shown, its window focused, typing in
   * it): with the server's `resume_on_return`, a suspended or parked kernel's resume starts
   * now (`outcome` `started`), before a cell asks for it.
   */
  export function returned(
    kernelId: string,
    settings?: ServerConnection.ISettings
  ): Promise<IReturnResult> {
    return requestAPI<IReturnResult>(
      `kernels/${encodeURIComponent(kernelId)}/returned`,
      { method: 'POST', body: '{}' },
      settings
    );
  }

  export function checkpoints(
    kernelId: string,
    settings?: ServerConnection.ISettings
  ): Promise<ICheckpointInfo[]> {
    return requestAPI<ICheckpointInfo[]>(
      `kernels/${encodeURIComponent(kernelId)}/checkpoints`,
      {},
      settings
    );
  }

  export function deleteCheckpoint(
    checkpointId: string,
    settings?: ServerConnection.ISettings
  ): Promise<void> {
    return requestAPI<void>(
      `checkpoints/${encodeURIComponent(checkpointId)}`,
      { method: 'DELETE' },
      settings
    );
  }
}
