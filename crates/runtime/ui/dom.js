// Small DOM and formatting helpers. Text always goes in as text, never as HTML, so event
// values and names shown in the page cannot inject markup.

/**
 * Creates an element: `h('td', { class: 'num', dataset: { testid: 'lag' } }, 12)`.
 * Props: `class`, `dataset`, `on<event>` handlers, other attributes (false/null skipped).
 * Children: nodes, strings and numbers (as text), arrays, null/false (skipped).
 */
export function h(tag, props = {}, ...children) {
  const element = tag === 'svg' || SVG_TAGS.has(tag)
    ? document.createElementNS('http://www.w3.org/2000/svg', tag)
    : document.createElement(tag);
  for (const [name, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === 'dataset') Object.assign(element.dataset, value);
    else if (name.startsWith('on')) element.addEventListener(name.slice(2), value);
    else element.setAttribute(name, value === true ? '' : String(value));
  }
  element.append(...flatten(children));
  return element;
}

const SVG_TAGS = new Set(['g', 'line', 'polyline', 'circle', 'text', 'rect', 'title']);

function flatten(children) {
  return children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false)
    .map((c) => (c instanceof Node ? c : String(c)));
}

/** A `<table>` with a header row and the given rows (arrays of cells or `<tr>`s). */
export function table(testid, headings, rows) {
  return h('table', { dataset: { testid } },
    h('thead', {}, h('tr', {}, headings.map((t) => h('th', {}, t)))),
    h('tbody', {}, rows.map((row) => (row instanceof Node ? row : h('tr', {}, row.map((c) => cell(c)))))));
}

/** A table cell; numbers are right-aligned. */
export function cell(content, testid) {
  const numeric = typeof content === 'number';
  return h('td', { class: numeric ? 'num' : null, dataset: testid ? { testid } : undefined }, content);
}

/** Keeps a `<select>`'s options equal to `values` (each a string or [value, label]),
 *  keeping the user's choice when it is still offered. */
export function setOptions(select, values, empty) {
  const wanted = values.map((v) => (Array.isArray(v) ? v : [v, v]));
  const current = [...select.options].map((o) => [o.value, o.textContent]);
  if (JSON.stringify(current) === JSON.stringify(wanted)) return;
  const chosen = select.value;
  select.replaceChildren(...wanted.map(([value, label]) => h('option', { value }, label)));
  if (wanted.length === 0 && empty) select.append(h('option', { value: '' }, empty));
  if (wanted.some(([value]) => value === chosen)) select.value = chosen;
}

/** 1536 → "1.5 KiB". */
export function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit === 0 ? value : value.toFixed(1)} ${units[unit]}`;
}

/** 90061000 → "1 d 1 h"; at most two units. */
export function duration(ms) {
  if (ms === null || ms === undefined) return '–';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const parts = [];
  let rest = Math.floor(ms / 1000);
  for (const [size, unit] of [[86400, 'd'], [3600, 'h'], [60, 'min'], [1, 's']]) {
    if (rest >= size) {
      parts.push(`${Math.floor(rest / size)} ${unit}`);
      rest %= size;
    }
  }
  return parts.slice(0, 2).join(' ');
}

/** A time of day, "14:03:07", from Unix milliseconds. */
export function clock(ms) {
  return new Date(ms).toLocaleTimeString([], { hour12: false });
}

/** "3 s ago" from Unix milliseconds. */
export function ago(ms) {
  return `${duration(Math.max(0, Date.now() - ms))} ago`;
}

/** An event's value as one line: JSON, or the base64 of its bytes. */
export function preview(event) {
  if (!event) return '(no longer in the log)';
  if ('value_base64' in event) return `base64:${event.value_base64}`;
  const text = JSON.stringify(event.value);
  return text.length > 160 ? `${text.slice(0, 157)}…` : text;
}
