// The dashboard's pages. Each page names the collections it watches (`watches`, shared and
// closed when the page is left), loads what it needs once per change (`load`: permissions,
// the scheduler's explanation, objects in member clusters) and renders from both (`render`).
// Actions are ordinary API requests made as the user, offered only when a
// SelfSubjectAccessReview says the user may make them.

import * as api from './api.js';
import { age, badge, bar, bytes, condition, copy, cores, dialog, h, link, quantity, s, table, tile, toast } from './ui.js';

const W = {
  clusters: { name: 'clusters', path: '/apis/cluster.karmada.io/v1alpha1/clusters', perm: ['cluster.karmada.io', 'clusters'] },
  rbs: { name: 'rbs', path: '/apis/work.karmada.io/v1alpha2/resourcebindings', perm: ['work.karmada.io', 'resourcebindings'] },
  crbs: { name: 'crbs', path: '/apis/work.karmada.io/v1alpha2/clusterresourcebindings', perm: ['work.karmada.io', 'clusterresourcebindings'] },
  pp: { name: 'pp', path: '/apis/policy.karmada.io/v1alpha1/propagationpolicies', perm: ['policy.karmada.io', 'propagationpolicies'] },
  cpp: { name: 'cpp', path: '/apis/policy.karmada.io/v1alpha1/clusterpropagationpolicies', perm: ['policy.karmada.io', 'clusterpropagationpolicies'] },
  op: { name: 'op', path: '/apis/policy.karmada.io/v1alpha1/overridepolicies', perm: ['policy.karmada.io', 'overridepolicies'] },
  cop: { name: 'cop', path: '/apis/policy.karmada.io/v1alpha1/clusteroverridepolicies', perm: ['policy.karmada.io', 'clusteroverridepolicies'] },
  edge: { name: 'edge', path: '/apis/edge.flotilla.io/v1alpha1/edgereports', perm: ['edge.flotilla.io', 'edgereports'] },
  // Pull agents' heartbeats (Karmada's cluster Leases); optional: left out for users without it.
  leases: { name: 'leases', path: '/apis/coordination.k8s.io/v1/namespaces/karmada-cluster/leases', perm: ['coordination.k8s.io', 'leases', 'karmada-cluster'] },
};

const UNSCHEDULABLE = 'cluster.karmada.io/unschedulable';
const CLUSTERS_PATH = W.clusters.path;

// ---- what the objects say -------------------------------------------------------------------

const isReady = (c) => (condition(c, 'Ready') || {}).status === 'True';
const nameOf = (o) => o.metadata.name;
const bindingsOf = (ctx) => [...(ctx.data.rbs || []), ...(ctx.data.crbs || [])];
const bindingHref = (b) => `#/workload/${encodeURIComponent(b.metadata.namespace || '_')}/${encodeURIComponent(b.metadata.name)}`;
const placed = (b) => (b.spec && b.spec.clusters) || [];
const aggregated = (b) => (b.status && b.status.aggregatedStatus) || [];
const failing = (b) => aggregated(b).filter((a) => a.applied === false);
const byName = (a, b) => (nameOf(a) < nameOf(b) ? -1 : nameOf(a) > nameOf(b) ? 1 : 0);
/// The policy that placed a binding (Karmada records its name in annotations, older versions in
/// labels): `{ cluster, namespace, name }`, or null.
function policyOf(b) {
  const m = Object.assign({}, b.metadata.labels || {}, b.metadata.annotations || {});
  if (m['propagationpolicy.karmada.io/name']) {
    return { cluster: false, namespace: m['propagationpolicy.karmada.io/namespace'] || b.metadata.namespace, name: m['propagationpolicy.karmada.io/name'] };
  }
  if (m['clusterpropagationpolicy.karmada.io/name']) return { cluster: true, namespace: '', name: m['clusterpropagationpolicy.karmada.io/name'] };
  return null;
}
const policyText = (b) => {
  const p = policyOf(b);
  if (p) return p.cluster ? `ClusterPropagationPolicy ${p.name}` : `PropagationPolicy ${p.namespace}/${p.name}`;
  const owner = (b.metadata.ownerReferences || []).find((o) => o.kind.startsWith('Federated'));
  return owner ? `KubeFed placement of ${owner.kind} ${owner.name}` : '—';
};
const templateText = (b) => {
  const r = b.spec.resource;
  return `${r.kind} ${r.namespace ? `${r.namespace}/` : ''}${r.name}`;
};

/// Ready replicas summed from the members, over the replicas wanted (the template's, or what
/// the members run when overrides give a cluster more); for a non-workload, the clusters it
/// applied in over the clusters it is placed in.
function readiness(b) {
  const agg = aggregated(b);
  if (b.spec.replicas) {
    const ready = agg.reduce((n, a) => n + ((a.status && a.status.readyReplicas) || 0), 0);
    const running = agg.reduce((n, a) => n + ((a.status && a.status.replicas) || 0), 0);
    const want = Math.max(b.spec.replicas, running);
    return { ready, want, ok: ready >= want };
  }
  const applied = agg.filter((a) => a.applied).length;
  return { ready: applied, want: placed(b).length, ok: applied >= placed(b).length };
}

function placementText(b) {
  const p = placed(b);
  if (!p.length) return '—';
  return p.map((c) => (c.replicas !== undefined && b.spec.replicas ? `${c.name}: ${c.replicas}` : c.name)).join(', ');
}

function readyBadge(c) {
  const cond = condition(c, 'Ready');
  if (!cond) return badge('Unknown', 'warn', { 'data-ready': 'Unknown' });
  if (cond.status === 'True') return badge('Ready', 'ok', { 'data-ready': 'True' });
  return badge(`${cond.status === 'False' ? 'NotReady' : 'Unknown'} ${age(cond.lastTransitionTime)}`, 'bad',
    { 'data-ready': cond.status, title: `${cond.reason || ''}: ${cond.message || ''} (since ${cond.lastTransitionTime})` });
}

function taintBadges(c) {
  return ((c.spec && c.spec.taints) || []).map((t) => badge(`${t.key}${t.value ? `=${t.value}` : ''}:${t.effect}`, t.key === UNSCHEDULABLE ? 'warn' : ''));
}

function resources(c) {
  const r = (c.status && c.status.resourceSummary) || {};
  const total = r.allocatable || {};
  const used = r.allocated || {};
  return {
    cpu: [quantity(used.cpu), quantity(total.cpu)],
    memory: [quantity(used.memory), quantity(total.memory)],
    pods: [quantity(used.pods), quantity(total.pods)],
  };
}

function nodes(c) {
  const n = (c.status && c.status.nodeSummary) || {};
  return [n.readyNum || 0, n.totalNum || 0];
}

// ---- actions ----------------------------------------------------------------------------------

/// Read the cluster, change its taints, write it back at the version read; again on conflict.
async function updateTaints(name, change) {
  const path = `${CLUSTERS_PATH}/${encodeURIComponent(name)}`;
  for (let attempt = 0; ; attempt += 1) {
    const c = await api.get(path);
    const taints = change((c.spec && c.spec.taints) || []);
    if (!taints) return false;
    c.spec.taints = taints;
    try {
      await api.request('PUT', path, c);
      return true;
    } catch (e) {
      if (e.code !== 409 || attempt >= 4) throw e;
    }
  }
}

async function cordon(name, on) {
  const changed = await updateTaints(name, (taints) => {
    const has = taints.some((t) => t.key === UNSCHEDULABLE && t.effect === 'NoSchedule');
    if (on === has) return null;
    return on ? [...taints, { key: UNSCHEDULABLE, effect: 'NoSchedule' }] : taints.filter((t) => !(t.key === UNSCHEDULABLE && t.effect === 'NoSchedule'));
  });
  toast(changed ? `${name} ${on ? 'cordoned' : 'uncordoned'}` : `${name} was already ${on ? 'cordoned' : 'uncordoned'}`);
}

function taintDialog(name) {
  const key = h('input', { name: 'key', placeholder: 'dedicated', required: true });
  const value = h('input', { name: 'value', placeholder: 'gpu (optional)' });
  const effect = h('select', { name: 'effect' }, ['NoSchedule', 'PreferNoSchedule', 'NoExecute'].map((e) => h('option', { value: e }, e)));
  dialog(`Taint cluster ${name}`, h('div', {},
    h('label', {}, 'Key'), key, h('label', {}, 'Value'), value, h('label', {}, 'Effect'), effect,
    h('p', { class: 'muted' }, 'As `flotilla taint clusters NAME key=value:Effect` (--overwrite): a taint with the same key and effect is replaced.')),
  [['Taint', async () => {
    if (!key.value.trim()) throw new Error('a taint needs a key');
    const t = { key: key.value.trim(), effect: effect.value };
    if (value.value.trim()) t.value = value.value.trim();
    await updateTaints(name, (taints) => [...taints.filter((x) => !(x.key === t.key && x.effect === t.effect)), t]);
    toast(`${name} tainted ${t.key}:${t.effect}`);
  }, true]]);
}

async function untaint(name, taint) {
  await updateTaints(name, (taints) => taints.filter((x) => !(x.key === taint.key && x.effect === taint.effect)));
  toast(`${name}: removed ${taint.key}:${taint.effect}`);
}

function joinDialog() {
  const push = 'flotilla join NAME --kubeconfig NAME.kubeconfig --region REGION';
  const pull = 'flotilla token create --print-register-command';
  const origin = window.location.origin;
  dialog('Add a member cluster', h('div', {},
    h('p', {}, 'Push mode: the control plane reaches the member. Run where both kubeconfigs are:'),
    h('pre', { 'data-command': 'join' }, push),
    h('button', { onclick: () => copy(push) }, 'Copy join command'),
    h('p', {}, 'Pull mode (a member behind NAT): make a bootstrap token and run the register command it prints on the member:'),
    h('pre', { 'data-command': 'register' }, pull),
    h('button', { onclick: () => copy(pull) }, 'Copy token command'),
    h('p', { class: 'muted' }, `Control plane: ${origin}. Add --control-plane-kubeconfig FILE when KUBECONFIG is not the control plane's.`)), []);
}

function clusterActions(c, ctx) {
  if (!ctx.extra.canUpdateClusters) return null;
  const cordoned = ((c.spec && c.spec.taints) || []).some((t) => t.key === UNSCHEDULABLE);
  const run = (f) => async () => { try { await f(); } catch (e) { toast(e.message, true); } };
  return h('span', {},
    cordoned
      ? h('button', { 'data-action': 'uncordon', onclick: run(() => cordon(nameOf(c), false)) }, 'Uncordon')
      : h('button', { 'data-action': 'cordon', onclick: run(() => cordon(nameOf(c), true)) }, 'Cordon'),
    h('button', { 'data-action': 'taint', onclick: () => taintDialog(nameOf(c)) }, 'Taint…'));
}

// ---- pages ---------------------------------------------------------------------------------

function denied(ctx, name, what) {
  return ctx.denied[name] ? h('p', { class: 'muted', 'data-denied': name }, `You may not list ${what}.`) : null;
}

const overview = {
  title: 'Overview',
  watches: () => [W.clusters, W.rbs, W.crbs, W.pp, W.cpp, W.op, W.cop, W.edge, W.leases],
  load: async () => ({
    canUpdateClusters: await api.can('update', 'cluster.karmada.io', 'clusters'),
  }),
  render(ctx) {
    const clusters = [...(ctx.data.clusters || [])].sort(byName);
    const ready = clusters.filter(isReady);
    const offline = clusters.filter((c) => !isReady(c));
    const bindings = bindingsOf(ctx);
    const policies = ['pp', 'cpp', 'op', 'cop'].reduce((n, k) => n + (ctx.data[k] || []).length, 0);
    const failingWorks = bindings.reduce((n, b) => n + failing(b).length, 0);
    const reports = ctx.data.edge || [];
    const pending = reports.reduce((n, r) => n + ((r.status && r.status.pending) || 0), 0);
    const conflicts = reports.reduce((n, r) => n + ((r.status && r.status.conflicts) || 0), 0);
    const sum = (f) => clusters.reduce((acc, c) => { const [u, t] = f(c); return [acc[0] + u, acc[1] + t]; }, [0, 0]);
    const [nodesReady, nodesTotal] = sum(nodes);
    const [cpuUsed, cpuTotal] = sum((c) => resources(c).cpu);
    const [memUsed, memTotal] = sum((c) => resources(c).memory);
    const [podsUsed, podsTotal] = sum((c) => resources(c).pods);
    const oldestOffline = offline.map((c) => (condition(c, 'Ready') || {}).lastTransitionTime).filter(Boolean).sort()[0];
    const tiles = h('div', { class: 'tiles' },
      tile('Clusters ready', `${ready.length}/${clusters.length}`, offline.length ? `${offline.length} offline${oldestOffline ? `, oldest since ${age(oldestOffline)}` : ''}` : 'all connected',
        offline.length ? 'bad' : '', { 'data-tile': 'clusters-ready' }),
      tile('Nodes', `${nodesReady}/${nodesTotal}`, 'ready / total'),
      h('div', { class: 'tile' }, h('div', { class: 'label' }, 'CPU allocated'), h('div', { class: 'value' }, `${cores(cpuUsed)}/${cores(cpuTotal)}`), bar(cpuUsed, cpuTotal)),
      h('div', { class: 'tile' }, h('div', { class: 'label' }, 'Memory allocated'), h('div', { class: 'value' }, `${bytes(memUsed)}`), h('div', { class: 'sub' }, `of ${bytes(memTotal)}`), bar(memUsed, memTotal)),
      h('div', { class: 'tile' }, h('div', { class: 'label' }, 'Pods'), h('div', { class: 'value' }, `${podsUsed}/${podsTotal}`), bar(podsUsed, podsTotal)),
      tile('Templates', String(new Set(bindings.map(templateText)).size), 'placed by a policy', '', { 'data-tile': 'templates' }),
      tile('Policies', String(policies), 'propagation + override'),
      tile('Bindings', String(bindings.length), `${bindings.filter((b) => !readiness(b).ok).length} not ready`),
      tile('Failing Works', String(failingWorks), failingWorks ? 'not applied in a member' : 'none', failingWorks ? 'bad' : '', { 'data-tile': 'failing-works' }),
      tile('Edge changes', `${pending} pending`, `${conflicts} open conflict${conflicts === 1 ? '' : 's'}`, conflicts ? 'warn' : '', { 'data-tile': 'edge' }));
    const leases = new Map((ctx.data.leases || []).map((l) => [nameOf(l), l]));
    const heartbeat = (c) => {
      if (c.spec.syncMode !== 'Pull') return h('span', { class: 'muted', title: 'a Push cluster is probed by the control plane' }, 'probed');
      const l = leases.get(nameOf(c));
      const at = l && l.spec && l.spec.renewTime;
      return at ? h('span', { title: at }, `${age(at)} ago`) : h('span', { class: 'muted' }, ctx.denied.leases ? '' : 'none yet');
    };
    const rows = clusters.map((c) => {
      const r = resources(c);
      const [nr, nt] = nodes(c);
      return h('tr', { 'data-cluster': nameOf(c) },
        h('td', {}, link(`#/cluster/${encodeURIComponent(nameOf(c))}`, nameOf(c))),
        h('td', {}, readyBadge(c)),
        h('td', {}, (c.status && c.status.kubernetesVersion) || ''),
        h('td', {}, c.spec.syncMode || 'Push'),
        h('td', {}, [c.spec.region, (c.spec.zones || []).join(',') || c.spec.zone].filter(Boolean).join(' / ')),
        h('td', {}, `${nr}/${nt}`),
        h('td', {}, `${cores(r.cpu[0])}/${cores(r.cpu[1])}`),
        h('td', {}, `${bytes(r.memory[0])}/${bytes(r.memory[1])}`),
        h('td', {}, `${r.pods[0]}/${r.pods[1]}`),
        h('td', { title: 'the Ready condition last changed' }, age((condition(c, 'Ready') || {}).lastTransitionTime)),
        h('td', {}, heartbeat(c)),
        h('td', {}, taintBadges(c)),
        h('td', {}, clusterActions(c, ctx)));
    });
    const workloads = [...bindings].sort((a, b) => (readiness(a).ok - readiness(b).ok) || (templateText(a) < templateText(b) ? -1 : 1));
    const shown = workloads.slice(0, 200);
    const wrows = shown.map((b) => {
      const r = readiness(b);
      const f = failing(b);
      return h('tr', { 'data-binding': `${b.metadata.namespace || ''}/${b.metadata.name}` },
        h('td', {}, link(bindingHref(b), templateText(b))),
        h('td', { 'data-placement': '' }, placementText(b)),
        h('td', {}, badge(`Ready ${r.ready}/${r.want}`, r.ok ? 'ok' : 'warn', { 'data-readiness': `${r.ready}/${r.want}` })),
        h('td', {}, f.length ? badge(`${f.length} failing`, 'bad') : badge('applied', 'ok')),
        h('td', {}, policyText(b)));
    });
    return h('div', {},
      h('h1', {}, 'Fleet overview',
        h('button', { 'data-action': 'add-cluster', onclick: joinDialog }, 'Add a cluster…')),
      tiles,
      h('h2', {}, `Clusters (${clusters.length})`),
      denied(ctx, 'clusters', 'clusters'),
      table(['Name', 'Health', 'Version', 'Mode', 'Region / zones', 'Nodes', 'CPU', 'Memory', 'Pods', 'Since', 'Heartbeat', 'Taints', ''], rows, { 'data-table': 'clusters' }),
      h('h2', {}, `Workloads (${bindings.length}${bindings.length > shown.length ? `, the first ${shown.length}: not ready first` : ''})`),
      table(['Template', 'Placement', 'Ready', 'Works', 'Policy'], wrows, { 'data-table': 'workloads' }));
  },
};

const cluster = {
  title: 'Cluster',
  watches: (p) => [W.clusters, W.rbs, W.crbs, W.edge,
    { name: 'events', path: '/api/v1/events', query: `fieldSelector=${encodeURIComponent(`involvedObject.kind=Cluster,involvedObject.name=${p.name}`)}`, perm: ['', 'events'] }],
  load: async () => ({ canUpdateClusters: await api.can('update', 'cluster.karmada.io', 'clusters') }),
  render(ctx) {
    const c = (ctx.data.clusters || []).find((x) => nameOf(x) === ctx.params.name);
    if (!c) return h('div', {}, h('h1', {}, ctx.params.name), h('p', { class: 'muted' }, ctx.synced.clusters ? 'No such cluster.' : 'Loading…'));
    const st = c.status || {};
    const conds = (st.conditions || []).map((x) => h('tr', {},
      h('td', {}, x.type), h('td', {}, badge(x.status, x.status === 'True' ? 'ok' : 'bad')), h('td', {}, x.reason || ''), h('td', {}, x.message || ''), h('td', {}, age(x.lastTransitionTime))));
    const taints = ((c.spec && c.spec.taints) || []).map((t) => h('tr', {},
      h('td', {}, t.key), h('td', {}, t.value || ''), h('td', {}, t.effect), h('td', {}, t.timeAdded ? age(t.timeAdded) : ''),
      h('td', {}, ctx.extra.canUpdateClusters ? h('button', { class: 'danger', onclick: async () => { try { await untaint(nameOf(c), t); } catch (e) { toast(e.message, true); } } }, 'Remove') : null)));
    const rs = st.resourceSummary || {};
    const resourceNames = [...new Set([...Object.keys(rs.allocatable || {}), ...Object.keys(rs.allocated || {})])].sort();
    const resRows = resourceNames.map((r) => h('tr', {}, h('td', {}, r), h('td', {}, (rs.allocatable || {})[r] || ''), h('td', {}, (rs.allocated || {})[r] || ''), h('td', {}, (rs.allocating || {})[r] || '')));
    const here = bindingsOf(ctx).filter((b) => placed(b).some((t) => t.name === nameOf(c)));
    const wl = here.map((b) => {
      const t = placed(b).find((x) => x.name === nameOf(c));
      const a = aggregated(b).find((x) => x.clusterName === nameOf(c));
      return h('tr', {}, h('td', {}, link(bindingHref(b), templateText(b))), h('td', {}, t.replicas === undefined ? '' : String(t.replicas)),
        h('td', {}, a ? badge(a.applied ? 'applied' : 'failing', a.applied ? 'ok' : 'bad', { title: a.appliedMessage || '' }) : badge('pending', 'warn')),
        h('td', {}, a && a.health ? a.health : ''));
    });
    const events = [...(ctx.data.events || [])].sort((a, b) => ((a.lastTimestamp || a.eventTime || '') < (b.lastTimestamp || b.eventTime || '') ? 1 : -1)).slice(0, 50)
      .map((e) => h('tr', {}, h('td', {}, badge(e.type, e.type === 'Warning' ? 'warn' : '')), h('td', {}, e.reason), h('td', {}, e.message), h('td', {}, String(e.count || 1)), h('td', {}, age(e.lastTimestamp || e.eventTime))));
    const report = (ctx.data.edge || []).find((r) => r.spec && r.spec.cluster === nameOf(c));
    return h('div', { 'data-page': 'cluster' },
      h('h1', {}, nameOf(c), readyBadge(c), taintBadges(c), clusterActions(c, ctx)),
      h('div', { class: 'cols' },
        h('div', { class: 'panel' }, h('dl', { class: 'kv' },
          h('dt', {}, 'Mode'), h('dd', {}, c.spec.syncMode || 'Push'),
          h('dt', {}, 'API endpoint'), h('dd', {}, c.spec.apiEndpoint || '—'),
          h('dt', {}, 'Kubernetes'), h('dd', {}, st.kubernetesVersion || '—'),
          h('dt', {}, 'Region / zones'), h('dd', {}, [c.spec.region, (c.spec.zones || []).join(', ')].filter(Boolean).join(' / ') || '—'),
          h('dt', {}, 'Provider'), h('dd', {}, c.spec.provider || '—'),
          h('dt', {}, 'Nodes'), h('dd', {}, `${nodes(c)[0]} ready of ${nodes(c)[1]}`),
          h('dt', {}, 'APIs served'), h('dd', {}, `${(st.apiEnablements || []).reduce((n, g) => n + (g.resources || []).length, 0)} resources`),
          report ? [h('dt', {}, 'Edge'), h('dd', {}, report.status && report.status.online ? 'online' : `offline since ${(report.status && report.status.offlineSince) || '?'}`,
            ` — ${(report.status && report.status.pending) || 0} pending, ${(report.status && report.status.conflicts) || 0} conflicts`)] : null)),
        h('div', {}, h('h2', { style: 'margin-top:0' }, 'Resources'), table(['Resource', 'Allocatable', 'Allocated', 'Allocating'], resRows))),
      h('h2', {}, 'Conditions'), table(['Type', 'Status', 'Reason', 'Message', 'Since'], conds),
      h('h2', {}, 'Taints'), table(['Key', 'Value', 'Effect', 'Added', ''], taints),
      h('h2', {}, `Workloads placed here (${here.length})`), table(['Template', 'Replicas', 'Applied', 'Health'], wl),
      h('h2', {}, 'Events'), denied(ctx, 'events', 'events'), table(['Type', 'Reason', 'Message', 'Count', 'Last seen'], events));
  },
};

// -- the workload page --

function findBinding(ctx) {
  const { namespace, name } = ctx.params;
  return (namespace === '_' ? ctx.data.crbs : ctx.data.rbs || []).find((b) => nameOf(b) === name && (namespace === '_' || b.metadata.namespace === namespace));
}

function flatten(v, prefix, out) {
  if (v && typeof v === 'object' && !Array.isArray(v)) {
    for (const [k, x] of Object.entries(v)) flatten(x, /^[A-Za-z_][A-Za-z0-9_]*$/.test(k) ? (prefix ? `${prefix}.${k}` : k) : `${prefix}[${JSON.stringify(k)}]`, out);
  } else if (Array.isArray(v)) {
    v.forEach((x, i) => flatten(x, `${prefix}[${i}]`, out));
  } else {
    out.set(prefix, v);
  }
  return out;
}

// What the control plane adds to every member copy, not an override: the object's identity and
// bookkeeping, status, and Karmada's own labels and annotations.
const NOISE = /^(apiVersion$|kind$|status\b|metadata\.(uid|resourceVersion|generation|creationTimestamp|managedFields|ownerReferences|finalizers|selfLink|deletionTimestamp)\b|metadata\.(labels|annotations)\["[^"]*karmada\.io\/)/;
/// What the Work for one cluster changes of the template: the overrides as applied (a divided
/// workload's `spec.replicas`, the cluster's share, is shown under Placement instead).
function overrideDiff(template, manifest, divided) {
  const a = flatten(template || {}, '', new Map());
  const b = flatten(manifest || {}, '', new Map());
  const skip = (k) => NOISE.test(k) || (divided && k === 'spec.replicas');
  const out = [];
  for (const [k, v] of b) if (!skip(k) && a.get(k) !== v) out.push({ path: k, from: a.get(k), to: v });
  for (const [k, v] of a) if (!skip(k) && !b.has(k)) out.push({ path: k, from: v, to: undefined });
  return out.sort((x, y) => (x.path < y.path ? -1 : 1));
}

function topology(b, works, members, pods) {
  const nodesOut = [];
  const edges = [];
  const W_ = 200; const H_ = 40; const GX = 56; const GY = 14;
  const x = (col) => 8 + col * (W_ + GX);
  const clusters = placed(b).map((t) => t.name);
  let row = 0;
  const rowsOf = {};
  for (const c of clusters) {
    const n = Math.max(1, Math.min((pods[c] || []).length, 6));
    rowsOf[c] = row;
    row += n;
  }
  const y = (r) => 8 + r * (H_ + GY);
  const node = (id, col, r, kind, label, state) => nodesOut.push({ id, col, r, kind, label, state });
  const r = b.spec.resource;
  const rd = readiness(b);
  node('template', 0, 0, r.kind, r.name, rd.ok ? 'ok' : '');
  node('binding', 1, 0, b.kind || (b.metadata.namespace ? 'ResourceBinding' : 'ClusterResourceBinding'), b.metadata.name, (condition(b, 'Scheduled') || {}).status === 'True' ? 'ok' : 'bad');
  edges.push(['template', 'binding']);
  for (const c of clusters) {
    const w = works.find((x) => x.metadata.namespace === `karmada-es-${c}`);
    const applied = w && condition(w, 'Applied');
    node(`work-${c}`, 2, rowsOf[c], `Work in ${c}`, w ? w.metadata.name : '(not yet)', applied ? (applied.status === 'True' ? 'ok' : 'bad') : '');
    edges.push(['binding', `work-${c}`]);
    const m = members[c];
    const ag = aggregated(b).find((a) => a.clusterName === c);
    const manifest = manifestOf(w);
    const kind = (manifest && manifest.kind) || r.kind;
    const mname = (manifest && manifest.metadata && manifest.metadata.name) || r.name;
    node(`member-${c}`, 3, rowsOf[c], `${kind} in ${c}`, m === null ? `${mname} (absent)` : mname, ag && ag.health === 'Healthy' ? 'ok' : ag && ag.health === 'Unhealthy' ? 'bad' : '');
    edges.push([`work-${c}`, `member-${c}`]);
    const ps = pods[c] || [];
    ps.slice(0, 5).forEach((p, i) => {
      const readyP = ((p.status && p.status.conditions) || []).some((x) => x.type === 'Ready' && x.status === 'True');
      node(`pod-${c}-${i}`, 4, rowsOf[c] + i, `Pod in ${c}`, p.metadata.name, readyP ? 'ok' : 'bad');
      edges.push([`member-${c}`, `pod-${c}-${i}`]);
    });
    if (ps.length > 5) {
      node(`pod-${c}-more`, 4, rowsOf[c] + 5, `Pods in ${c}`, `+${ps.length - 5} more`, '');
      edges.push([`member-${c}`, `pod-${c}-more`]);
    }
  }
  const at = Object.fromEntries(nodesOut.map((n) => [n.id, n]));
  const width = x(5);
  const height = y(Math.max(row, 1)) + 4;
  const svg = s('svg', { width, height, viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': 'topology' },
    edges.map(([from, to]) => {
      const a = at[from]; const bb = at[to];
      const x1 = x(a.col) + W_; const y1 = y(a.r) + H_ / 2; const x2 = x(bb.col); const y2 = y(bb.r) + H_ / 2;
      return s('path', { d: `M${x1},${y1} C${x1 + GX / 2},${y1} ${x2 - GX / 2},${y2} ${x2},${y2}` });
    }),
    nodesOut.map((n) => s('g', { class: `node ${n.state}`, transform: `translate(${x(n.col)},${y(n.r)})`, 'data-node': n.id },
      s('rect', { width: W_, height: H_, rx: 6 }),
      s('text', { x: 8, y: 14, class: 'kind' }, n.kind),
      s('text', { x: 8, y: 31 }, n.label.length > 28 ? `${n.label.slice(0, 27)}…` : n.label))));
  return h('div', { class: 'graph', 'data-graph': 'topology' }, svg);
}

/// The member's copy of a Work's manifest: what the member object is (for a `Federated<Kind>`
/// the rendered object, not the template's kind).
function manifestOf(w) {
  return (w && w.spec && w.spec.workload && (w.spec.workload.manifests || [])[0]) || null;
}

const selectorText = (o) => {
  const m = o && o.spec && o.spec.selector && (o.spec.selector.matchLabels || (typeof o.spec.selector === 'object' && !o.spec.selector.matchExpressions ? o.spec.selector : null));
  return m && Object.keys(m).length ? Object.entries(m).map(([k, v]) => `${k}=${v}`).join(',') : null;
};

/// What runs in the members: each placed cluster's object (its Work's manifest, read through the
/// cluster proxy) and its pods (from the global view when a ResourceRegistry caches pods, else
/// through the proxy), for clusters that are Ready and only when the user may read them.
async function memberReads(b, works, ctx) {
  const clusters = placed(b).map((t) => t.name);
  const out = { members: {}, pods: {}, podsFrom: null };
  const manifests = {};
  for (const c of clusters) {
    const m = manifestOf(works.find((w) => w.metadata.namespace === `karmada-es-${c}`));
    if (m && m.kind && m.apiVersion && m.metadata) manifests[c] = m;
  }
  const any = Object.values(manifests)[0];
  const labelSelector = selectorText(any);
  const namespace = any && any.metadata.namespace;
  const nsPath = namespace ? `/namespaces/${encodeURIComponent(namespace)}` : '';
  // The global view, when it caches pods (a ResourceRegistry selects them); else the proxy.
  let global = false;
  if (labelSelector && await api.can('list', 'search.karmada.io', 'resourceregistries')) {
    const regs = await api.get('/apis/search.karmada.io/v1alpha1/resourceregistries');
    global = (regs.items || []).some((reg) => ((reg.spec && reg.spec.resourceSelectors) || []).some((sel) => sel.kind === 'Pod'));
  }
  if (global && await api.can('get', 'search.karmada.io', 'search', '', 'cache')) {
    const list = await api.get(`/apis/search.karmada.io/v1alpha1/search/cache/api/v1${nsPath}/pods?labelSelector=${encodeURIComponent(labelSelector)}`);
    for (const p of list.items || []) {
      const c = (p.metadata.annotations || {})['resource.karmada.io/cached-from-cluster'];
      (out.pods[c] = out.pods[c] || []).push(p);
    }
    out.podsFrom = 'the global view';
  }
  if (!(await api.can('get', 'cluster.karmada.io', 'clusters', '', 'proxy'))) {
    out.proxyDenied = true;
    return out;
  }
  const up = new Set((ctx.data.clusters || []).filter(isReady).map(nameOf));
  await Promise.all(clusters.filter((c) => up.has(c) && manifests[c]).map(async (c) => {
    const m = manifests[c];
    const prefix = `${CLUSTERS_PATH}/${encodeURIComponent(c)}/proxy`;
    const found = await api.pluralOf(m.apiVersion, m.kind);
    if (found) {
      try { out.members[c] = await api.getNamed(m.apiVersion, found.plural, m.metadata.namespace, m.metadata.name, prefix); } catch { out.members[c] = null; }
    }
    if (labelSelector && !global) {
      try { out.pods[c] = (await api.get(`${prefix}/api/v1${nsPath}/pods?labelSelector=${encodeURIComponent(labelSelector)}`)).items || []; } catch { out.pods[c] = []; }
    }
  }));
  if (!global && labelSelector) out.podsFrom = 'each cluster through the cluster proxy';
  return out;
}

function scaleDialog(template, path) {
  const n = h('input', { type: 'number', min: 0, value: template.spec.replicas, name: 'replicas' });
  dialog(`Scale ${template.kind} ${template.metadata.name}`, h('div', {}, h('label', {}, 'Replicas'), n,
    h('p', { class: 'muted' }, 'Changes the template; the scheduler divides the replicas again.')),
  [['Scale', async () => {
    const replicas = Number(n.value);
    if (!Number.isInteger(replicas) || replicas < 0) throw new Error('replicas must be a whole number, 0 or more');
    await api.mergePatch(path, { spec: { replicas } });
    toast(`${template.metadata.name} scaled to ${replicas}`);
  }, true]]);
}

async function rebalance(b) {
  const r = b.spec.resource;
  const name = `${r.name}-${Date.now().toString(36)}`.toLowerCase().slice(0, 63);
  const workload = { apiVersion: r.apiVersion, kind: r.kind, name: r.name };
  if (r.namespace) workload.namespace = r.namespace;
  await api.create('/apis/apps.karmada.io/v1alpha1/workloadrebalancers',
    { apiVersion: 'apps.karmada.io/v1alpha1', kind: 'WorkloadRebalancer', metadata: { name }, spec: { workloads: [workload], ttlSecondsAfterFinished: 300 } });
  toast(`WorkloadRebalancer ${name} created: the scheduler places ${r.name} afresh`);
}

const workload = {
  title: 'Workload',
  watches: (p, ctx) => {
    const out = [W.clusters, p.namespace === '_'
      ? W.crbs
      : { name: 'rbs', path: `/apis/work.karmada.io/v1alpha2/namespaces/${encodeURIComponent(p.namespace)}/resourcebindings`, perm: ['work.karmada.io', 'resourcebindings', p.namespace] }];
    const b = ctx && findBinding(ctx);
    const id = b && (b.metadata.labels || {})[p.namespace === '_' ? 'clusterresourcebinding.karmada.io/permanent-id' : 'resourcebinding.karmada.io/permanent-id'];
    if (id) {
      const label = p.namespace === '_' ? 'clusterresourcebinding.karmada.io/permanent-id' : 'resourcebinding.karmada.io/permanent-id';
      out.push({ name: 'works', path: '/apis/work.karmada.io/v1alpha1/works', query: `labelSelector=${encodeURIComponent(`${label}=${id}`)}`, perm: ['work.karmada.io', 'works'] });
    }
    if (b) {
      const ns = b.spec.resource.namespace;
      const evPath = ns ? `/api/v1/namespaces/${encodeURIComponent(ns)}/events` : '/api/v1/events';
      out.push({ name: 'events', path: evPath, query: `fieldSelector=${encodeURIComponent(`involvedObject.name=${b.spec.resource.name}`)}`, perm: ['', 'events', ns] });
    }
    return out;
  },
  load: async (ctx) => {
    const b = findBinding(ctx);
    if (!b) return {};
    const r = b.spec.resource;
    const resource = b.metadata.namespace ? 'resourcebindings' : 'clusterresourcebindings';
    const out = {};
    const found = await api.pluralOf(r.apiVersion, r.kind);
    if (found) {
      out.templatePath = api.objectPath(r.apiVersion, found.plural, r.namespace, r.name);
      const group = r.apiVersion.includes('/') ? r.apiVersion.split('/')[0] : '';
      if (await api.can('get', group, found.plural, r.namespace)) {
        try { out.template = await api.getNamed(r.apiVersion, found.plural, r.namespace, r.name); } catch (e) { out.templateError = e.message; }
        if (!out.template && !out.templateError) out.templateError = 'The template is gone.';
      }
      out.canScale = !!(out.template && out.template.spec && out.template.spec.replicas !== undefined) && await api.can('patch', group, found.plural, r.namespace);
    }
    if (await api.can('get', 'work.karmada.io', resource, b.metadata.namespace, 'explain')) {
      const base = b.metadata.namespace ? `/apis/work.karmada.io/v1alpha2/namespaces/${encodeURIComponent(b.metadata.namespace)}` : '/apis/work.karmada.io/v1alpha2';
      try { out.explain = await api.get(`${base}/${resource}/${encodeURIComponent(b.metadata.name)}/explain`); } catch (e) { out.explainError = e.message; }
    }
    out.canRebalance = (await api.servedGroups()).has('apps.karmada.io') && await api.can('create', 'apps.karmada.io', 'workloadrebalancers');
    Object.assign(out, await memberReads(b, ctx.data.works || [], ctx));
    return out;
  },
  render(ctx) {
    const b = findBinding(ctx);
    const { namespace, name } = ctx.params;
    if (!b) return h('div', {}, h('h1', {}, name), h('p', { class: 'muted' }, ctx.synced.rbs || ctx.synced.crbs ? `No binding ${namespace === '_' ? '' : `${namespace}/`}${name}.` : 'Loading…'));
    const x = ctx.extra;
    const works = ctx.data.works || [];
    const rd = readiness(b);
    const policy = policyText(b);
    const placeRows = placed(b).map((t) => {
      const a = aggregated(b).find((y) => y.clusterName === t.name) || {};
      const st = a.status || {};
      return h('tr', { 'data-placed': t.name },
        h('td', {}, link(`#/cluster/${encodeURIComponent(t.name)}`, t.name)),
        h('td', { 'data-replicas': '' }, t.replicas === undefined ? '—' : String(t.replicas)),
        h('td', {}, a.applied === undefined ? badge('pending', 'warn') : badge(a.applied ? 'applied' : 'failing', a.applied ? 'ok' : 'bad', { title: a.appliedMessage || '' })),
        h('td', {}, a.health || ''),
        h('td', {}, st.readyReplicas !== undefined || st.replicas !== undefined ? `${st.readyReplicas || 0}/${st.replicas || 0} ready` : JSON.stringify(st).slice(0, 80)));
    });
    const explainRows = x.explain ? (x.explain.attempts || []).flatMap((at) => (at.clusters || []).map((c) => h('tr', {},
      h('td', {}, c.name), h('td', {}, c.filters.map((f) => badge(f.plugin, f.passed ? 'ok' : 'bad', { title: f.reason || 'passed' }))),
      h('td', {}, c.score === null ? '—' : String(c.score)), h('td', {}, c.availableReplicas === null ? '—' : String(c.availableReplicas)),
      h('td', {}, c.replicas === null ? '—' : String(c.replicas)), h('td', {}, c.outcome)))) : [];
    const diffs = placed(b).map((t) => {
      const w = works.find((y) => y.metadata.namespace === `karmada-es-${t.name}`);
      const manifest = w && w.spec && w.spec.workload && (w.spec.workload.manifests || [])[0];
      const d = x.template && manifest ? overrideDiff(x.template, manifest, !!b.spec.replicas) : null;
      return h('div', { class: 'panel', 'data-diff': t.name }, h('strong', {}, t.name),
        !w ? h('p', { class: 'muted' }, 'No Work yet.') : !d ? h('p', { class: 'muted' }, 'Template not readable.') : !d.length ? h('p', { class: 'muted' }, 'As the template: no overrides.')
          : h('pre', {}, d.map((e) => [
            e.from !== undefined ? h('div', { class: 'diff-del' }, `- ${e.path}: ${JSON.stringify(e.from)}`) : null,
            e.to !== undefined ? h('div', { class: 'diff-add' }, `+ ${e.path}: ${JSON.stringify(e.to)}`) : null])));
    });
    const podRows = Object.entries(x.pods || {}).flatMap(([c, ps]) => ps.map((p) => {
      const readyP = ((p.status && p.status.conditions) || []).some((y) => y.type === 'Ready' && y.status === 'True');
      return h('tr', {}, h('td', {}, c), h('td', {}, p.metadata.name), h('td', {}, badge(readyP ? 'Ready' : ((p.status && p.status.phase) || 'Pending'), readyP ? 'ok' : 'warn')),
        h('td', {}, (p.spec && p.spec.nodeName) || ''), h('td', {}, age(p.metadata.creationTimestamp)));
    }));
    const events = [...(ctx.data.events || [])].sort((a, c) => ((a.lastTimestamp || a.eventTime || '') < (c.lastTimestamp || c.eventTime || '') ? 1 : -1)).slice(0, 50)
      .map((e) => h('tr', {}, h('td', {}, badge(e.type, e.type === 'Warning' ? 'warn' : '')), h('td', {}, e.reason), h('td', {}, e.message), h('td', {}, e.source && e.source.component ? e.source.component : (e.reportingComponent || '')), h('td', {}, age(e.lastTimestamp || e.eventTime))));
    const tstatus = x.template && x.template.status;
    return h('div', { 'data-page': 'workload' },
      h('h1', {}, templateText(b), badge(`Ready ${rd.ready}/${rd.want}`, rd.ok ? 'ok' : 'warn', { 'data-readiness': `${rd.ready}/${rd.want}` }),
        x.canScale ? h('button', { 'data-action': 'scale', onclick: () => scaleDialog(x.template, x.templatePath) }, 'Scale…') : null,
        x.canRebalance ? h('button', { 'data-action': 'rebalance', onclick: async () => { try { await rebalance(b); } catch (e) { toast(e.message, true); } } }, 'Rebalance') : null),
      h('p', { class: 'muted' }, `Binding ${b.metadata.namespace ? `${b.metadata.namespace}/` : ''}${b.metadata.name} · ${policy}`),
      h('h2', {}, 'Topology'), topology(b, works, x.members || {}, x.pods || {}),
      h('h2', {}, 'Placement'), table(['Cluster', 'Replicas', 'Applied', 'Health', 'Status in the member'], placeRows, { 'data-table': 'placement' }),
      h('h2', {}, 'Why here: the scheduler'),
      x.explain ? [h('p', {}, x.explain.result.scheduled ? `Scheduled (${x.explain.strategy || 'not a workload'}${x.explain.replicas ? `, ${x.explain.replicas} replicas` : ''})` : `Not scheduled: ${x.explain.result.message}`),
        table(['Cluster', 'Filters', 'Score', 'Room', 'Replicas', 'Outcome'], explainRows, { 'data-table': 'explain' })]
        : h('p', { class: 'muted' }, x.explainError || 'You may not read the explanation (resourcebindings/explain).'),
      h('div', { class: 'cols' },
        h('div', {}, h('h2', {}, 'Status, aggregated'), h('pre', {}, tstatus ? JSON.stringify(tstatus, null, 2) : x.templateError || '—')),
        h('div', {}, h('h2', {}, 'Template'), h('pre', {}, x.template ? JSON.stringify(x.template.spec, null, 2).slice(0, 4000) : '—'))),
      h('h2', {}, 'Overrides per cluster (the Work against the template)'), diffs,
      h('h2', {}, `Pods${x.podsFrom ? ` (from ${x.podsFrom})` : ''}`),
      x.proxyDenied && !x.podsFrom ? h('p', { class: 'muted' }, 'You may not read member clusters (clusters/proxy).') : table(['Cluster', 'Pod', 'Ready', 'Node', 'Age'], podRows),
      h('h2', {}, 'Events'), table(['Type', 'Reason', 'Message', 'From', 'Last seen'], events));
  },
};

function selectorsText(p) {
  return ((p.spec && p.spec.resourceSelectors) || []).map((r) => `${r.kind}${r.name ? ` ${r.name}` : ''}${r.namespace ? ` in ${r.namespace}` : ''}${r.labelSelector ? ' (by labels)' : ''}`).join(', ');
}

function placementOf(p) {
  const pl = (p.spec && p.spec.placement) || {};
  const aff = pl.clusterAffinity || {};
  const parts = [];
  if (aff.clusterNames) parts.push(`clusters ${aff.clusterNames.join(', ')}`);
  if (aff.labelSelector) parts.push('clusters by label');
  if (pl.clusterAffinities) parts.push(`${pl.clusterAffinities.length} affinity terms`);
  if (pl.replicaScheduling) parts.push(`${pl.replicaScheduling.replicaSchedulingType || ''} ${pl.replicaScheduling.replicaDivisionPreference || ''}`.trim());
  if (pl.spreadConstraints) parts.push('spread');
  return parts.join('; ') || 'every cluster';
}

const policies = {
  title: 'Policies',
  watches: () => [W.pp, W.cpp, W.op, W.cop, W.rbs, W.crbs],
  render(ctx) {
    const bindings = bindingsOf(ctx);
    const bound = (p, cluster) => bindings.filter((b) => {
      const of = policyOf(b);
      return of && of.cluster === cluster && of.name === nameOf(p) && (cluster || of.namespace === p.metadata.namespace);
    });
    const prow = (p, cluster) => {
      const bs = bound(p, cluster);
      return h('tr', { 'data-policy': `${p.metadata.namespace || ''}/${nameOf(p)}` },
        h('td', {}, cluster ? 'ClusterPropagationPolicy' : 'PropagationPolicy'), h('td', {}, p.metadata.namespace || '—'), h('td', {}, nameOf(p)),
        h('td', {}, selectorsText(p)), h('td', {}, placementOf(p)), h('td', {}, String((p.spec && p.spec.priority) || 0)),
        h('td', {}, bs.length ? bs.slice(0, 10).map((b) => h('div', {}, link(bindingHref(b), templateText(b)))) : h('span', { class: 'muted' }, 'nothing yet'), bs.length > 10 ? h('div', { class: 'muted' }, `and ${bs.length - 10} more`) : null));
    };
    const orow = (p, cluster) => {
      const rules = (p.spec && p.spec.overrideRules) || [];
      return h('tr', {}, h('td', {}, cluster ? 'ClusterOverridePolicy' : 'OverridePolicy'), h('td', {}, p.metadata.namespace || '—'), h('td', {}, nameOf(p)), h('td', {}, selectorsText(p)),
        h('td', {}, rules.map((r) => h('div', {}, `${r.targetCluster && r.targetCluster.clusterNames ? r.targetCluster.clusterNames.join(', ') : r.targetCluster ? 'clusters by label' : 'every cluster'}: ${Object.keys(r.overriders || {}).join(', ')}`))));
    };
    const pps = [...(ctx.data.pp || []).map((p) => prow(p, false)), ...(ctx.data.cpp || []).map((p) => prow(p, true))];
    const ops = [...(ctx.data.op || []).map((p) => orow(p, false)), ...(ctx.data.cop || []).map((p) => orow(p, true))];
    return h('div', { 'data-page': 'policies' },
      h('h1', {}, 'Policies'),
      h('h2', {}, `Propagation (${pps.length})`), table(['Kind', 'Namespace', 'Name', 'Selects', 'Placement', 'Priority', 'Bound templates'], pps),
      h('h2', {}, `Overrides (${ops.length})`), table(['Kind', 'Namespace', 'Name', 'Selects', 'Rules'], ops));
  },
};

const kubefed = {
  title: 'KubeFed',
  watches: () => [W.rbs, W.crbs,
    { name: 'ftcs', path: '/apis/core.kubefed.io/v1beta1/namespaces/kube-federation-system/federatedtypeconfigs', perm: ['core.kubefed.io', 'federatedtypeconfigs', 'kube-federation-system'] }],
  load: async (ctx) => {
    const feds = bindingsOf(ctx).filter((b) => b.spec.resource.kind.startsWith('Federated')).slice(0, 100);
    const objects = {};
    await Promise.all(feds.map(async (b) => {
      const r = b.spec.resource;
      const found = await api.pluralOf(r.apiVersion, r.kind);
      const group = r.apiVersion.split('/')[0];
      if (!found || !(await api.can('get', group, found.plural, r.namespace))) return;
      try { objects[`${r.namespace || ''}/${r.kind}/${r.name}`] = await api.getNamed(r.apiVersion, found.plural, r.namespace, r.name); } catch { /* unreadable */ }
    }));
    return { objects };
  },
  render(ctx) {
    const feds = bindingsOf(ctx).filter((b) => b.spec.resource.kind.startsWith('Federated'));
    const rows = feds.map((b) => {
      const r = b.spec.resource;
      const o = (ctx.extra.objects || {})[`${r.namespace || ''}/${r.kind}/${r.name}`];
      const spec = (o && o.spec) || {};
      const pl = spec.placement || {};
      const overrides = (spec.overrides || []).map((ov) => h('div', {}, `${ov.clusterName}: ${(ov.clusterOverrides || []).map((c) => `${c.op || 'replace'} ${c.path}${c.value === undefined ? '' : `=${JSON.stringify(c.value)}`}`).join('; ')}`));
      return h('tr', {}, h('td', {}, r.kind), h('td', {}, r.namespace || '—'), h('td', {}, link(bindingHref(b), r.name)),
        h('td', {}, pl.clusters ? pl.clusters.map((c) => c.name).join(', ') : pl.clusterSelector ? 'by label' : '—'),
        h('td', {}, placementText(b)), h('td', {}, overrides.length ? overrides : h('span', { class: 'muted' }, 'none')));
    });
    const types = (ctx.data.ftcs || []).map((t) => h('tr', {}, h('td', {}, nameOf(t)), h('td', {}, `${(t.spec.federatedType || {}).kind || ''}`),
      h('td', {}, badge(t.spec.propagation || 'Disabled', t.spec.propagation === 'Enabled' ? 'ok' : ''))));
    return h('div', { 'data-page': 'kubefed' },
      h('h1', {}, 'KubeFed'),
      h('h2', {}, `Federated objects (${feds.length})`), table(['Kind', 'Namespace', 'Name', 'Placement', 'Placed', 'Overrides'], rows),
      h('h2', {}, 'Federated types'), denied(ctx, 'ftcs', 'FederatedTypeConfigs'), table(['FederatedTypeConfig', 'Federated kind', 'Propagation'], types));
  },
};

async function resolve(cluster, record, keep) {
  await api.mergePatch(`/apis/edge.flotilla.io/v1alpha1/namespaces/karmada-es-${encodeURIComponent(cluster)}/edgechanges/${encodeURIComponent(record)}`,
    { metadata: { annotations: { 'edge.flotilla.io/resolve': keep } } });
  toast(`${record}: keeping the ${keep === 'edge' ? "edge's" : "control plane's"} values`);
}

const edge = {
  title: 'Edge',
  watches: () => [W.edge, W.clusters],
  load: async (ctx) => {
    const may = {};
    for (const r of ctx.data.edge || []) may[r.spec.cluster] = await api.can('patch', 'edge.flotilla.io', 'edgechanges', `karmada-es-${r.spec.cluster}`);
    return { may };
  },
  render(ctx) {
    const reports = [...(ctx.data.edge || [])].sort(byName);
    const panels = reports.map((r) => {
      const st = r.status || {};
      const entries = (st.entries || []).map((e) => h('tr', { 'data-record': e.record },
        h('td', {}, `${e.object.kind} ${e.object.namespace ? `${e.object.namespace}/` : ''}${e.object.name}`), h('td', {}, e.change),
        h('td', {}, badge(e.phase, e.phase === 'Conflict' ? 'bad' : e.phase === 'Decided' ? 'ok' : 'warn')),
        h('td', {}, (e.fields || []).map((f) => h('div', {}, `${f.path || '(object)'}: ${f.outcome}`))),
        h('td', {}, e.manager || ''), h('td', {}, age(e.lastSeen)),
        h('td', {}, e.phase === 'Conflict' && ctx.extra.may && ctx.extra.may[r.spec.cluster] ? [
          h('button', { 'data-action': 'keep-edge', onclick: async () => { try { await resolve(r.spec.cluster, e.record, 'edge'); } catch (x) { toast(x.message, true); } } }, 'Keep edge'),
          h('button', { 'data-action': 'keep-control-plane', onclick: async () => { try { await resolve(r.spec.cluster, e.record, 'control-plane'); } catch (x) { toast(x.message, true); } } }, 'Keep control plane')] : null)));
      return h('div', { class: 'panel', 'data-edge': r.spec.cluster },
        h('h2', { style: 'margin-top:0' }, link(`#/cluster/${encodeURIComponent(r.spec.cluster)}`, r.spec.cluster), ' ',
          st.online ? badge('online', 'ok') : badge(`offline${st.offlineSince ? ` since ${age(st.offlineSince)}` : ''}`, 'bad')),
        h('p', {}, `${st.pending || 0} pending · ${st.conflicts || 0} open conflicts · ${st.bornAtEdge || 0} born at the edge${st.omittedEntries ? ` · ${st.omittedEntries} older not shown` : ''}`),
        table(['Object', 'Change', 'Phase', 'Fields', 'By', 'Last seen', ''], entries));
    });
    return h('div', { 'data-page': 'edge' }, h('h1', {}, 'Edge: changes made while offline'),
      denied(ctx, 'edge', 'edge reports'),
      panels.length ? panels : h('p', { class: 'muted' }, 'No edge reports: no cluster is in Pull mode.'));
  },
};

// The pure rules, for the unit tests (tests/dashboard).
export { flatten, overrideDiff, placementText, policyOf, readiness, selectorText };

export const PAGES = { overview, cluster, workload, policies, kubefed, edge };
export const NAV = [['#/', 'Overview', 'overview'], ['#/policies', 'Policies', 'policies'], ['#/kubefed', 'KubeFed', 'kubefed'], ['#/edge', 'Edge', 'edge']];

/// The page and its parameters for a location hash.
export function route(hash) {
  const parts = hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  switch (parts[0]) {
    case 'cluster': return ['cluster', { name: parts[1] || '' }];
    case 'workload': return ['workload', { namespace: parts[1] || '_', name: parts[2] || '' }];
    case 'policies': case 'kubefed': case 'edge': return [parts[0], {}];
    default: return ['overview', {}];
  }
}
