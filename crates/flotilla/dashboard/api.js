// The dashboard's API client. Every request carries the logged-in user's bearer token, so the
// API server's authentication and RBAC decide what the user sees and may do; the page holds no
// credential of its own. Collections are kept current by shared list+watch caches (`watch`),
// reference-counted so a page's watches close when it is left and the open count stays bounded.

const TOKEN_KEY = 'flotilla.dashboard.token';
// (No sessionStorage outside a browser: the unit tests import the modules under node.)
const session = globalThis.sessionStorage || { getItem: () => null, setItem: () => {}, removeItem: () => {} };
let token = session.getItem(TOKEN_KEY) || '';
let unauthorized = () => {};

export function setToken(t) {
  token = t || '';
  if (token) session.setItem(TOKEN_KEY, token);
  else session.removeItem(TOKEN_KEY);
  permissions.clear();
}
export const hasToken = () => token !== '';
export function onUnauthorized(f) { unauthorized = f; }

/// A refused request: the Kubernetes Status when the server sent one.
export class ApiError extends Error {
  constructor(code, status, text) {
    super((status && status.message) || text || `HTTP ${code}`);
    this.code = code;
    this.reason = status && status.reason;
  }
}

function headers(extra) {
  return Object.assign({ Authorization: `Bearer ${token}`, Accept: 'application/json' }, extra || {});
}

export async function request(method, path, body, contentType) {
  const init = { method, headers: headers() };
  if (body !== undefined) {
    init.headers['Content-Type'] = contentType || 'application/json';
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  const text = await r.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (r.status === 401) {
    unauthorized();
  }
  if (!r.ok) throw new ApiError(r.status, data, text);
  return data;
}
export const get = (path) => request('GET', path);
export const create = (path, body) => request('POST', path, body);
export const mergePatch = (path, body) => request('PATCH', path, body, 'application/merge-patch+json');
/// A JSON patch with a `test` of the version read: a conflict instead of a lost update.
export const jsonPatch = (path, ops) => request('PATCH', path, ops, 'application/json-patch+json');

/// Who the token is (SelfSubjectReview).
export async function whoAmI() {
  const r = await create('/apis/authentication.k8s.io/v1/selfsubjectreviews',
    { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' });
  return (r && r.status && r.status.userInfo) || {};
}

const permissions = new Map();
/// Whether the user may `verb` the resource (SelfSubjectAccessReview, cached per login).
export function can(verb, group, resource, namespace, subresource, name) {
  const key = [verb, group, resource, namespace || '', subresource || '', name || ''].join('|');
  if (!permissions.has(key)) {
    const attrs = { verb, group, resource };
    if (namespace) attrs.namespace = namespace;
    if (subresource) attrs.subresource = subresource;
    if (name) attrs.name = name;
    permissions.set(key, create('/apis/authorization.k8s.io/v1/selfsubjectaccessreviews',
      { apiVersion: 'authorization.k8s.io/v1', kind: 'SelfSubjectAccessReview', spec: { resourceAttributes: attrs } })
      .then((r) => !!(r && r.status && r.status.allowed))
      .catch(() => false));
  }
  return permissions.get(key);
}

let groups = null;
/// The API groups the server serves (`/apis`), to offer only what exists.
export function servedGroups() {
  if (!groups) {
    groups = get('/apis').then((l) => new Set((l.groups || []).map((g) => g.name))).catch(() => new Set());
  }
  return groups;
}

const resourceLists = new Map();
/// The plural of `kind` in `apiVersion` (discovery), for building a template's URL.
export async function pluralOf(apiVersion, kind) {
  const path = apiVersion.includes('/') ? `/apis/${apiVersion}` : `/api/${apiVersion}`;
  if (!resourceLists.has(path)) resourceLists.set(path, get(path).catch(() => ({ resources: [] })));
  const list = await resourceLists.get(path);
  const r = (list.resources || []).find((x) => x.kind === kind && !x.name.includes('/'));
  return r ? { plural: r.name, namespaced: r.namespaced } : null;
}

/// The URL of a collection (in `namespace`, for a namespaced one).
function collectionPath(apiVersion, plural, namespace) {
  const base = apiVersion.includes('/') ? `/apis/${apiVersion}` : `/api/${apiVersion}`;
  const ns = namespace ? `/namespaces/${encodeURIComponent(namespace)}` : '';
  return `${base}${ns}/${plural}`;
}

/// The URL of one object.
export function objectPath(apiVersion, plural, namespace, name) {
  return `${collectionPath(apiVersion, plural, namespace)}/${encodeURIComponent(name)}`;
}

/// One object read through its collection with a name selector: null when it is not there (a
/// list answers 200 either way, so a missing object is no failed request in the console).
export async function getNamed(apiVersion, plural, namespace, name, prefix) {
  const collection = collectionPath(apiVersion, plural, namespace);
  const list = await get(`${prefix || ''}${collection}?fieldSelector=${encodeURIComponent(`metadata.name=${name}`)}`);
  return (list.items && list.items[0]) || null;
}

const keyOf = (o) => `${o.metadata.namespace || ''}/${o.metadata.name}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/// One collection (a list URL and its query), listed then watched; on a broken watch it
/// resumes from the last version seen, and lists again when that version is gone (410).
class Watched {
  constructor(key, path, query) {
    this.key = key;
    this.path = path;
    this.query = query ? `&${query}` : '';
    this.items = new Map();
    this.synced = false;
    this.error = null;
    this.refs = 0;
    this.listeners = new Set();
    this.controller = new AbortController();
    this.pending = null;
    this.run();
  }

  list() { return [...this.items.values()]; }

  notify() {
    if (this.pending) return;
    this.pending = setTimeout(() => {
      this.pending = null;
      for (const f of this.listeners) f();
    }, 30);
  }

  stop() {
    this.controller.abort();
    clearTimeout(this.pending);
    this.listeners.clear();
  }

  async run() {
    let backoff = 500;
    let version = null;
    while (!this.controller.signal.aborted) {
      try {
        if (version === null) version = await this.relist();
        const next = await this.follow(version);
        version = next;
        backoff = 500;
      } catch (e) {
        if (this.controller.signal.aborted) return;
        this.error = e;
        this.notify();
        if (e instanceof ApiError && (e.code === 401 || e.code === 403)) return;
        await sleep(backoff);
        backoff = Math.min(backoff * 2, 10000);
        version = null;
      }
    }
  }

  async relist() {
    const items = new Map();
    let cont = '';
    let version = '';
    do {
      const page = await request('GET', `${this.path}?limit=500${cont ? `&continue=${encodeURIComponent(cont)}` : ''}${this.query}`);
      for (const o of page.items || []) items.set(keyOf(o), o);
      version = page.metadata.resourceVersion;
      cont = page.metadata.continue || '';
    } while (cont);
    this.items = items;
    this.synced = true;
    this.error = null;
    this.notify();
    return version;
  }

  /// Follows the watch from `version`; returns the version to resume from, or null to list.
  async follow(version) {
    const url = `${this.path}?watch=1&allowWatchBookmarks=true&resourceVersion=${encodeURIComponent(version)}${this.query}`;
    const r = await fetch(url, { headers: headers(), signal: this.controller.signal });
    if (!r.ok) {
      if (r.status === 401) unauthorized();
      throw new ApiError(r.status, null, await r.text());
    }
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buffered = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return version;
      buffered += decoder.decode(value, { stream: true });
      let nl;
      while ((nl = buffered.indexOf('\n')) >= 0) {
        const line = buffered.slice(0, nl).trim();
        buffered = buffered.slice(nl + 1);
        if (!line) continue;
        const event = JSON.parse(line);
        const o = event.object;
        if (event.type === 'ERROR') {
          if (o && o.code === 410) return null;
          throw new ApiError(o && o.code, o, 'watch error');
        }
        if (o && o.metadata && o.metadata.resourceVersion) version = o.metadata.resourceVersion;
        if (event.type === 'ADDED' || event.type === 'MODIFIED') this.items.set(keyOf(o), o);
        else if (event.type === 'DELETED') this.items.delete(keyOf(o));
        else continue;
        this.notify();
      }
    }
  }
}

const open = new Map();

/// A shared, live collection: `path` (a list URL) with an optional query (`labelSelector=…`).
export function watch(path, query) {
  const key = `${path}?${query || ''}`;
  let w = open.get(key);
  if (!w) {
    w = new Watched(key, path, query);
    open.set(key, w);
  }
  w.refs += 1;
  return w;
}

export function release(w) {
  w.refs -= 1;
  if (w.refs <= 0) {
    w.stop();
    open.delete(w.key);
  }
}

/// How many collections are open (each holds at most one watch to the server).
export const openWatches = () => open.size;

/// Close every collection (logging out).
export function closeAll() {
  for (const w of open.values()) w.stop();
  open.clear();
}
