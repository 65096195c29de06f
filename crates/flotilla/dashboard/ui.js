// Small DOM helpers: elements are built with `h` (text is always set as text, never parsed as
// HTML), plus formatting, a modal dialog and a toast.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    // Through CSSOM: the Content-Security-Policy refuses style attributes.
    else if (k === 'style') el.style.cssText = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

const SVG = 'http://www.w3.org/2000/svg';
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) el.setAttribute(k, String(v));
  for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c instanceof Node ? c : String(c));
  return el;
}

export const link = (href, text, attrs) => h('a', Object.assign({ href }, attrs || {}), text);

export function badge(text, kind, attrs) {
  return h('span', Object.assign({ class: `badge ${kind || ''}` }, attrs || {}), text);
}

export function table(headers, rows, attrs) {
  return h('div', { class: 'tablewrap' },
    h('table', attrs || {},
      h('thead', {}, h('tr', {}, headers.map((x) => h('th', {}, x)))),
      h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: headers.length, class: 'muted' }, 'None')))));
}

export function tile(label, value, sub, kind, attrs) {
  return h('div', Object.assign({ class: `tile ${kind || ''}` }, attrs || {}),
    h('div', { class: 'label' }, label), h('div', { class: 'value' }, value), sub ? h('div', { class: 'sub' }, sub) : null);
}

export function bar(used, total) {
  const pct = total > 0 ? Math.min(100, Math.round((100 * used) / total)) : 0;
  return h('div', { class: 'bar', title: `${pct}%` }, h('span', { style: `width:${pct}%` }));
}

/// `2m`, `3h`, `5d` since an RFC 3339 time.
export function age(time) {
  if (!time) return '';
  const secs = Math.max(0, (Date.now() - Date.parse(time)) / 1000);
  if (secs < 120) return `${Math.round(secs)}s`;
  if (secs < 7200) return `${Math.round(secs / 60)}m`;
  if (secs < 172800) return `${Math.round(secs / 3600)}h`;
  return `${Math.round(secs / 86400)}d`;
}

const UNITS = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, k: 1e3, M: 1e6, G: 1e9, T: 1e12, m: 1e-3, n: 1e-9, u: 1e-6 };
/// A Kubernetes quantity as a number (`500m` is 0.5, `2Gi` is 2147483648).
export function quantity(q) {
  if (q === undefined || q === null || q === '') return 0;
  const m = /^([0-9.eE+-]+)([a-zA-Z]*)$/.exec(String(q));
  if (!m) return 0;
  return parseFloat(m[1]) * (UNITS[m[2]] || 1);
}

export function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${n >= 10 || i === 0 ? Math.round(n) : n.toFixed(1)} ${units[i]}`;
}

export const cores = (n) => (n >= 10 ? String(Math.round(n)) : String(Math.round(n * 10) / 10));

export function condition(obj, type) {
  return ((obj.status && obj.status.conditions) || []).find((c) => c.type === type);
}

let toastTimer = null;
export function toast(text, bad) {
  const t = document.getElementById('toast');
  t.textContent = text;
  t.className = `show ${bad ? 'bad' : ''}`;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { t.className = ''; }, bad ? 6000 : 3000);
}

/// A modal dialog: `body` (nodes), and buttons `[label, action, primary]`; an action that
/// returns false keeps it open, one that throws shows the error in it.
export function dialog(title, body, buttons) {
  const d = document.getElementById('dialog');
  const error = h('div', { class: 'error' });
  const close = () => d.close();
  d.replaceChildren(
    h('h2', { style: 'margin-top:0' }, title),
    body, error,
    h('div', { class: 'actions' },
      buttons.map(([label, action, primary]) => h('button', {
        class: primary ? 'primary' : '',
        'data-action': label,
        onclick: async () => {
          error.textContent = '';
          try {
            if ((await action()) !== false) close();
          } catch (e) {
            error.textContent = e.message;
          }
        },
      }, label)),
      h('button', { 'data-action': 'close', onclick: close }, 'Close')));
  d.showModal();
}

/// Copy `text` to the clipboard, saying so.
export async function copy(text) {
  try {
    await navigator.clipboard.writeText(text);
    toast('Copied');
  } catch {
    toast('Copy it from the box: the browser refused the clipboard', true);
  }
}
