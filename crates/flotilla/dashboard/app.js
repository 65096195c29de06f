// The dashboard's shell: login with a bearer token, navigation by location hash, and the page
// lifecycle — open the page's collections (only those the user may list), re-render when any
// changes, run its loads one at a time, close what the next page does not need.

import * as api from './api.js';
import { NAV, PAGES, route } from './pages.js';
import { h, toast } from './ui.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const who = document.getElementById('who');

// For tests and the curious: open collections, render counts, when each page was first complete.
const probe = { openWatches: api.openWatches, renders: 0, timings: {}, readyAt: {}, page: null, ready: false };
window.flotilla = probe;

const state = {
  page: null, name: null, params: null, started: 0,
  held: new Map(), // collection key -> { spec, watched }
  denied: {}, extra: {}, loading: false, reload: false, renderQueued: false, complete: false, declared: false,
};

api.onUnauthorized(() => {
  if (!api.hasToken()) return;
  logout('The server refused the token (expired or revoked): log in again.');
});

function logout(message) {
  api.setToken('');
  api.closeAll();
  state.held.clear();
  state.page = null;
  showLogin(message);
}

function showLogin(message) {
  nav.replaceChildren();
  who.replaceChildren();
  const token = h('textarea', { id: 'token', rows: 5, placeholder: 'eyJhbGciOi… or a token of --token-auth-file', autocomplete: 'off', spellcheck: 'false' });
  const error = h('div', { class: 'error', id: 'login-error' }, message || '');
  const submit = async (e) => {
    e.preventDefault();
    error.textContent = '';
    try {
      await login(token.value.trim());
    } catch (x) {
      error.textContent = x.code === 401 ? 'The server does not accept this token.' : x.message;
    }
  };
  main.replaceChildren(h('form', { class: 'login panel', onsubmit: submit },
    h('h1', {}, 'Log in to Flotilla'),
    h('p', {}, 'Paste a bearer token. Every request this page makes carries it, so you see and may do what RBAC grants its user. Make one with:'),
    h('pre', {}, 'kubectl create serviceaccount dashboard-viewer\nkubectl create clusterrolebinding dashboard-viewer --clusterrole=view \\\n  --serviceaccount=default:dashboard-viewer\nkubectl create token dashboard-viewer'),
    token, error,
    h('div', { class: 'actions' }, h('button', { class: 'primary', type: 'submit', id: 'login' }, 'Log in'))));
  token.focus();
}

async function login(token) {
  if (!token) throw new Error('Paste a token first.');
  api.setToken(token);
  let user;
  try {
    user = await api.whoAmI();
  } catch (e) {
    api.setToken('');
    throw e;
  }
  start(user);
}

function start(user) {
  who.replaceChildren(h('span', { id: 'username', title: (user.groups || []).join(', ') }, user.username || '?'),
    h('button', { id: 'logout', onclick: () => logout('Logged out.') }, 'Log out'));
  window.onhashchange = navigate;
  navigate();
}

function navigate() {
  const [name, params] = route(window.location.hash);
  state.name = name;
  state.page = PAGES[name];
  state.params = params;
  state.extra = {};
  state.started = performance.now();
  state.complete = false;
  state.declared = false;
  state.denied = {};
  probe.page = name;
  probe.ready = false;
  nav.replaceChildren(...NAV.map(([href, label, page]) => h('a', { href, class: page === name ? 'active' : '' }, label)));
  main.replaceChildren(h('p', { class: 'muted' }, 'Loading…'));
  const page = state.page;
  sync().then(() => {
    if (page !== state.page) return;
    state.declared = true;
    queueRender();
    runLoad();
  });
}

function context() {
  const data = {};
  const synced = {};
  const errors = {};
  for (const [, { spec, watched }] of state.held) {
    data[spec.name] = watched.list();
    synced[spec.name] = watched.synced;
    if (watched.error) errors[spec.name] = watched.error;
  }
  return { params: state.params, data, synced, errors, denied: state.denied, extra: state.extra };
}

/// Opens the collections the page declares (given what it has so far) and the user may list;
/// closes those it no longer declares.
async function sync() {
  const page = state.page;
  const specs = page.watches(state.params, state.held.size ? context() : null);
  const wanted = new Map(specs.map((spec) => [`${spec.path}?${spec.query || ''}`, spec]));
  const fresh = [...wanted].filter(([key]) => !state.held.has(key));
  const allowed = await Promise.all(fresh.map(([, spec]) => {
    const [group, resource, namespace] = spec.perm;
    return Promise.all([api.can('list', group, resource, namespace), api.can('watch', group, resource, namespace)]).then(([l, w]) => l && w);
  }));
  if (page !== state.page) return;
  fresh.forEach(([key, spec], i) => {
    if (state.held.has(key)) return;
    if (!allowed[i]) {
      state.denied[spec.name] = true;
      return;
    }
    delete state.denied[spec.name];
    const watched = api.watch(spec.path, spec.query);
    watched.listeners.add(onChange);
    state.held.set(key, { spec, watched });
  });
  for (const [key, { watched }] of [...state.held]) {
    if (!wanted.has(key)) {
      watched.listeners.delete(onChange);
      api.release(watched);
      state.held.delete(key);
    }
  }
}

function onChange() {
  queueRender();
  runLoad();
  // What the page watches may depend on what arrived (a binding's Works).
  sync().then(queueRender);
}

function queueRender() {
  if (state.renderQueued) return;
  state.renderQueued = true;
  requestAnimationFrame(() => {
    state.renderQueued = false;
    render();
  });
}

function render() {
  if (!state.page) return;
  const ctx = context();
  const held = [...state.held.values()];
  const complete = state.declared && held.every(({ watched }) => watched.synced || watched.error);
  let view;
  try {
    view = state.page.render(ctx);
  } catch (e) {
    console.error('rendering', state.name, e);
    view = h('p', { class: 'error' }, `This page failed to render: ${e.message}`);
  }
  const errors = Object.entries(ctx.errors).map(([name, e]) => h('p', { class: 'error' }, `${name}: ${e.message} (retrying)`));
  main.replaceChildren(...errors, view);
  probe.renders += 1;
  if (complete && !state.complete) {
    state.complete = true;
    probe.timings[state.name] = Math.round(performance.now() - state.started);
    probe.readyAt[state.name] = performance.now();
    probe.ready = true;
  }
}

/// Runs the page's `load` (permissions, explanations, member reads) one at a time, again once
/// more if something changed while it ran.
async function runLoad() {
  const page = state.page;
  if (!page.load) return;
  if (state.loading) {
    state.reload = true;
    return;
  }
  state.loading = true;
  try {
    const extra = await page.load(context());
    if (page === state.page) {
      state.extra = Object.assign({}, state.extra, extra, { loaded: true });
      queueRender();
    }
  } catch (e) {
    toast(e.message, true);
  } finally {
    state.loading = false;
    if (state.reload && page === state.page) {
      state.reload = false;
      setTimeout(runLoad, 1000);
    }
  }
}

if (api.hasToken()) {
  api.whoAmI().then(start).catch(() => showLogin('Log in again.'));
} else {
  showLogin();
}
