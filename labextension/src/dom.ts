/**
 * Small DOM helpers for the panel: build elements once, then change only what differs
 * (text, attributes, visibility, the order of keyed children).
 */
import { LabIcon } from '@jupyterlab/ui-components';

type Child = Node | string | null | undefined | false;

/** A DOM element; text is always set as text, never parsed as HTML. */
export function h(
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

/** Show or hide an element if that changes it. */
export function setHidden(element: HTMLElement, hidden: boolean): void {
  if (element.hidden !== hidden) {
    element.hidden = hidden;
  }
}

/** Set an element's text if it differs; hide the element when `text` is null. */
export function setText(element: HTMLElement, text: string | null): void {
  setHidden(element, text === null);
  if (text !== null && element.textContent !== text) {
    element.textContent = text;
  }
}

/** Set (or, for null, remove) an attribute if it differs. */
export function setAttr(
  element: Element,
  name: string,
  value: string | null
): void {
  if (value === null) {
    if (element.hasAttribute(name)) {
      element.removeAttribute(name);
    }
  } else if (element.getAttribute(name) !== value) {
    element.setAttribute(name, value);
  }
}

/** Enable or disable a button if that changes it. */
export function setEnabled(button: HTMLButtonElement, enabled: boolean): void {
  if (button.disabled === enabled) {
    button.disabled = !enabled;
  }
}

/**
 * Make `parent`'s children exactly `wanted`, in order, moving only those out of place
 * and removing the others; a child already in place is not touched.
 */
export function syncChildren(
  parent: Element,
  wanted: readonly Element[]
): void {
  const keep = new Set<Element>(wanted);
  for (const child of Array.from(parent.children)) {
    if (!keep.has(child)) {
      child.remove();
    }
  }
  wanted.forEach((node, i) => {
    if (parent.children[i] !== node) {
      parent.insertBefore(node, parent.children[i] ?? null);
    }
  });
}

/**
 * A button showing `icon`, with `label` as its tooltip and accessible name; `text`, if
 * given, is shown beside the icon.
 */
export function iconButton(
  icon: LabIcon,
  label: string,
  onClick: () => unknown,
  text?: string
): HTMLButtonElement {
  const button = h('button', {
    type: 'button',
    class: 'jp-gpuckpt-icon-button',
    title: label,
    'aria-label': label
  }) as HTMLButtonElement;
  button.append(
    icon.element({
      tag: 'span',
      className: 'jp-gpuckpt-icon',
      height: '16px',
      width: '16px'
    })
  );
  if (text) {
    button.classList.add('jp-mod-text');
    button.append(h('span', { class: 'jp-gpuckpt-button-text' }, text));
  }
  button.addEventListener('click', () => {
    Promise.resolve(onClick()).catch(reason =>
      console.error('jupyter-gpuckpt: a panel action failed', reason)
    );
  });
  return button;
}

/** Change a button's tooltip and accessible name if they differ. */
export function setLabel(button: HTMLButtonElement, label: string): void {
  setAttr(button, 'title', label);
  setAttr(button, 'aria-label', label);
}
