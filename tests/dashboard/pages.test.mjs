// Unit tests of the dashboard's pure rules, run with node's own test runner (no npm):
//   node --test tests/dashboard/
// The browser tests (tests/browser) cover the pages as a whole.

import assert from 'node:assert/strict';
import test from 'node:test';

import { overrideDiff, placementText, policyOf, readiness, route, selectorText } from '../../crates/flotilla/dashboard/pages.js';
import { age, bytes, cores, quantity } from '../../crates/flotilla/dashboard/ui.js';

const binding = (spec, status, meta) => ({ metadata: Object.assign({ name: 'web-deployment', namespace: 'shop' }, meta || {}), spec, status });

test('quantities are read as Kubernetes writes them', () => {
  assert.equal(quantity('500m'), 0.5);
  assert.equal(quantity('2Gi'), 2 * 2 ** 30);
  assert.equal(quantity('1k'), 1000);
  assert.equal(quantity('16'), 16);
  assert.equal(quantity(undefined), 0);
  assert.equal(quantity('nonsense'), 0);
  assert.equal(bytes(64 * 2 ** 30), '64 GiB');
  assert.equal(bytes(1536), '1.5 KiB');
  assert.equal(cores(0.25), '0.3');
  assert.equal(cores(48), '48');
});

test('ages count from now', () => {
  const ago = (s) => new Date(Date.now() - s * 1000).toISOString();
  assert.equal(age(ago(30)), '30s');
  assert.equal(age(ago(600)), '10m');
  assert.equal(age(ago(3 * 3600)), '3h');
  assert.equal(age(ago(3 * 86400)), '3d');
  assert.equal(age(undefined), '');
});

test('routes name the page and its parameters', () => {
  assert.deepEqual(route(''), ['overview', {}]);
  assert.deepEqual(route('#/'), ['overview', {}]);
  assert.deepEqual(route('#/cluster/member%201'), ['cluster', { name: 'member 1' }]);
  assert.deepEqual(route('#/workload/shop/web-deployment'), ['workload', { namespace: 'shop', name: 'web-deployment' }]);
  assert.deepEqual(route('#/workload/_/cluster-wide'), ['workload', { namespace: '_', name: 'cluster-wide' }]);
  assert.deepEqual(route('#/edge'), ['edge', {}]);
  assert.deepEqual(route('#/no-such-page'), ['overview', {}]);
});

test('readiness sums the members and counts what overrides run', () => {
  const member = (readyReplicas, replicas) => ({ clusterName: 'm', applied: true, status: { readyReplicas, replicas } });
  assert.deepEqual(readiness(binding({ replicas: 2 }, { aggregatedStatus: [member(1, 1), member(1, 1)] })), { ready: 2, want: 2, ok: true });
  assert.deepEqual(readiness(binding({ replicas: 4 }, { aggregatedStatus: [member(1, 1), member(1, 1)] })), { ready: 2, want: 4, ok: false });
  // KubeFed's override runs 5 in one cluster where the template says 3.
  assert.deepEqual(readiness(binding({ replicas: 3 }, { aggregatedStatus: [member(5, 5), member(3, 3)] })), { ready: 8, want: 8, ok: true });
  // Not a workload: the clusters it applied in.
  const cm = binding({ clusters: [{ name: 'a' }, { name: 'b' }] }, { aggregatedStatus: [{ clusterName: 'a', applied: true }, { clusterName: 'b', applied: false }] });
  assert.deepEqual(readiness(cm), { ready: 1, want: 2, ok: false });
  assert.deepEqual(readiness(binding({ replicas: 1 }, undefined)), { ready: 0, want: 1, ok: false });
});

test('placement reads as clusters and their shares', () => {
  assert.equal(placementText(binding({ replicas: 2, clusters: [{ name: 'member1', replicas: 1 }, { name: 'member2', replicas: 1 }] })), 'member1: 1, member2: 1');
  assert.equal(placementText(binding({ clusters: [{ name: 'a' }, { name: 'b' }] })), 'a, b');
  assert.equal(placementText(binding({})), '—');
});

test('the policy comes from annotations, then labels', () => {
  assert.deepEqual(policyOf(binding({}, {}, { annotations: { 'propagationpolicy.karmada.io/name': 'p', 'propagationpolicy.karmada.io/namespace': 'shop' } })),
    { cluster: false, namespace: 'shop', name: 'p' });
  assert.deepEqual(policyOf(binding({}, {}, { labels: { 'clusterpropagationpolicy.karmada.io/name': 'cp' } })), { cluster: true, namespace: '', name: 'cp' });
  assert.equal(policyOf(binding({}, {}, {})), null);
});

test('the override diff leaves out bookkeeping and shows what overrides changed', () => {
  const template = {
    metadata: { name: 'web', labels: { app: 'web' }, uid: 'u1', resourceVersion: '5' },
    spec: { replicas: 2, template: { spec: { containers: [{ name: 'web', image: 'nginx' }] } } },
    status: { readyReplicas: 2 },
  };
  const manifest = {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: {
      name: 'web',
      labels: { app: 'web', 'karmada.io/managed': 'true', team: 'edge' },
      annotations: { 'work.karmada.io/name': 'web-123', 'resourcetemplate.karmada.io/uid': 'u1' },
    },
    spec: { replicas: 1, template: { spec: { containers: [{ name: 'web', image: 'mirror.example.com/nginx' }] } } },
  };
  assert.deepEqual(overrideDiff(template, manifest, true), [
    { path: 'metadata.labels.team', from: undefined, to: 'edge' },
    { path: 'spec.template.spec.containers[0].image', from: 'nginx', to: 'mirror.example.com/nginx' },
  ]);
  // Not divided: the replicas are an override too.
  assert.deepEqual(overrideDiff(template, manifest, false).map((d) => d.path), ['metadata.labels.team', 'spec.replicas', 'spec.template.spec.containers[0].image']);
  // A removed field, and a key with dots quoted.
  const removed = overrideDiff({ metadata: { annotations: { 'example.com/keep': 'x', note: 'y' } } }, { metadata: { annotations: { 'example.com/keep': 'x' } } }, false);
  assert.deepEqual(removed, [{ path: 'metadata.annotations.note', from: 'y', to: undefined }]);
  const dotted = overrideDiff({}, { metadata: { annotations: { 'example.com/new': 'z' } } }, false);
  assert.deepEqual(dotted, [{ path: 'metadata.annotations["example.com/new"]', from: undefined, to: 'z' }]);
});

test('pods are found by the member object selector', () => {
  assert.equal(selectorText({ spec: { selector: { matchLabels: { app: 'web', tier: 'front' } } } }), 'app=web,tier=front');
  assert.equal(selectorText({ spec: {} }), null);
  assert.equal(selectorText(null), null);
});
