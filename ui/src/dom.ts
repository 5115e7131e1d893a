/** A few lines of DOM building, so that views read as the markup they make. */

type Child = Node | string | number | null | undefined | false;

/** An element with attributes (`on…` functions become listeners) and children. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attributes: Record<string, unknown> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on') && typeof value === 'function') {
      element.addEventListener(name.slice(2).toLowerCase(), value as EventListener);
    } else if (name === 'className') element.className = String(value);
    else element.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

export function humanBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let u = 0;
  while (n >= 1024 && u < units.length - 1) {
    n /= 1024;
    u++;
  }
  return `${u === 0 ? n : n.toFixed(1)} ${units[u]}`;
}

export const formatDb = (db: number | null): string => (db === null ? 'lossless' : `${db.toFixed(2)} dB`);

export const formatNumber = (x: number): string =>
  x === 0 ? '0' : Math.abs(x) >= 1e4 || Math.abs(x) < 1e-3 ? x.toExponential(3) : x.toPrecision(4);

/**
 * A table that scrolls sideways when narrow: its caption (what a screen reader announces), its
 * column headers (text, or a ready header cell) and its body.
 */
export function scrollTable(
  attributes: Record<string, unknown>,
  caption: string,
  columns: ReadonlyArray<string | number | HTMLElement>,
  body: HTMLElement,
): HTMLElement {
  const head = columns.map((c) => (c instanceof HTMLElement ? c : h('th', { scope: 'col' }, c)));
  return h(
    'div',
    { className: 'scroll' },
    h('table', attributes, h('caption', {}, caption), h('thead', {}, h('tr', {}, ...head)), body),
  );
}
