/**
 * The server's GPUs in the panel: one row per GPU, keyed by uuid, changed in place.
 */
import { TranslationBundle } from '@jupyterlab/translation';
import { h, setAttr, setText, syncChildren } from './dom';
import { IGPU } from './types';
import { gpuView } from './view';

interface IGpuRow {
  node: HTMLElement;
  name: HTMLElement;
  detail: HTMLElement;
}

export class GpuList {
  constructor(trans: TranslationBundle) {
    this._trans = trans;
  }

  readonly node = h('ul', { class: 'jp-gpuckpt-gpus' });

  /**
   * Show `gpus`, changing only the rows whose data changed.
   *
   * @param holderOf the name to show for the kernel holding a GPU
   */
  update(gpus: readonly IGPU[], holderOf: (kernelId: string) => string): void {
    const rows: HTMLElement[] = [];
    for (const gpu of gpus) {
      const holder = gpu.kernel_id ? holderOf(gpu.kernel_id) : null;
      const view = gpuView(gpu, holder, this._trans);
      const row = this._rows.get(gpu.uuid) ?? this._newRow(gpu.uuid);
      setText(row.name, view.name);
      setText(row.detail, view.detail);
      setAttr(row.node, 'title', view.title);
      row.node.classList.toggle('jp-mod-free', view.free);
      rows.push(row.node);
    }
    for (const uuid of this._rows.keys()) {
      if (!gpus.some(g => g.uuid === uuid)) {
        this._rows.delete(uuid);
      }
    }
    syncChildren(this.node, rows);
  }

  private _newRow(uuid: string): IGpuRow {
    const name = h('div', { class: 'jp-gpuckpt-gpu-name' });
    const detail = h('div', { class: 'jp-gpuckpt-line' });
    const row = {
      node: h(
        'li',
        { class: 'jp-gpuckpt-gpu', 'data-gpu-uuid': uuid },
        name,
        detail
      ),
      name,
      detail
    };
    this._rows.set(uuid, row);
    return row;
  }

  private _trans: TranslationBundle;
  private _rows = new Map<string, IGpuRow>();
}
