// Package karmada gives a testenv kube-apiserver Karmada's API surface the way
// hack/deploy-karmada.sh does, from the files testenv/build.sh copies out of Karmada's Go
// module into $TESTENV_BIN_DIR/karmada-crds (nothing of Karmada's is copied into this repo):
// its CRDs with the conversion-webhook patches of its kustomization, its webhook
// configurations, and the APIService that registers karmada-aggregated-apiserver. It also
// joins member clusters in Push mode as `karmadactl join` does (a Secret and a Cluster).
//
// Karmada's manifests address the webhook and the aggregated API server as in-cluster
// Services; testenv runs them as processes on 127.0.0.1, so the rendering below points the
// webhook URLs at 127.0.0.1:<port> and makes the aggregated API server's Service an
// ExternalName of 127.0.0.1 (the aggregator then dials 127.0.0.1:<APIService port> and checks
// the certificate for <service>.<namespace>.svc, which testenv's certificate carries).
//
// Start reading at Render.
package karmada

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Names Karmada's deployment uses.
const (
	SystemNamespace  = "karmada-system"
	ClusterNamespace = "karmada-cluster"
	// AggregatedService is the Service (and TLS server name <service>.karmada-system.svc)
	// of karmada-aggregated-apiserver.
	AggregatedService = "karmada-aggregated-apiserver"
	// ClusterAPIService is the APIService karmada-aggregated-apiserver serves.
	ClusterAPIService = "v1alpha1.cluster.karmada.io"
	// webhookServiceURL is how Karmada's manifests address karmada-webhook.
	webhookServiceURL = "https://karmada-webhook.karmada-system.svc:443"
)

// Render turns Karmada's shipped manifests into objects for a karmada-apiserver whose
// webhook and aggregated API server listen on 127.0.0.1.
type Render struct {
	// Dir is the karmada-crds directory build.sh writes: crds/ (charts/karmada/_crds),
	// deploy/ (artifacts/deploy/*.yaml) and VERSION.
	Dir string
	// CABundle is the PEM of the CA that signed the webhook's and the aggregated API
	// server's serving certificates.
	CABundle                []byte
	WebhookPort             int
	AggregatedAPIServerPort int
}

// Version is the Karmada release the files come from.
func (r Render) Version() string {
	b, err := os.ReadFile(filepath.Join(r.Dir, "VERSION"))
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// Namespaces are the namespaces the control plane needs before anything else runs:
// artifacts/deploy/namespace.yaml (karmada-system) and karmada-cluster, where `karmadactl
// join` keeps the members' secrets.
func (r Render) Namespaces() []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, n := range []string{SystemNamespace, ClusterNamespace} {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("v1")
		u.SetKind("Namespace")
		u.SetName(n)
		out = append(out, u)
	}
	return out
}

// CRDs are the CRDs crds/kustomization.yaml lists, with its patches applied (the conversion
// webhooks of ResourceBinding and ClusterResourceBinding, pointed at 127.0.0.1).
func (r Render) CRDs() ([]*unstructured.Unstructured, error) {
	dir := filepath.Join(r.Dir, "crds")
	var k struct {
		Resources []string `json:"resources"`
		Patches   []struct {
			Path string `json:"path"`
		} `json:"patches"`
		PatchesStrategicMerge []string `json:"patchesStrategicMerge"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, fmt.Errorf("karmada CRDs: %w (build them with testenv/build.sh karmada-crds)", err)
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		return nil, fmt.Errorf("karmada CRDs: parse kustomization.yaml: %w", err)
	}
	if len(k.Resources) == 0 {
		return nil, errors.New("karmada CRDs: kustomization.yaml lists no resources")
	}
	byName := map[string]*unstructured.Unstructured{}
	var out []*unstructured.Unstructured
	for _, res := range k.Resources {
		objs, err := r.load(filepath.Join(dir, res))
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			byName[o.GetName()] = o
			out = append(out, o)
		}
	}
	patches := k.PatchesStrategicMerge
	for _, p := range k.Patches {
		patches = append(patches, p.Path)
	}
	for _, p := range patches {
		objs, err := r.load(filepath.Join(dir, p))
		if err != nil {
			return nil, err
		}
		for _, patch := range objs {
			target := byName[patch.GetName()]
			if target == nil {
				return nil, fmt.Errorf("karmada CRDs: patch %s targets %s, which no resource defines", p, patch.GetName())
			}
			merge(target.Object, patch.Object)
		}
	}
	return out, nil
}

// Registration is what makes the webhook and the aggregated API server reachable from
// karmada-apiserver: artifacts/deploy/webhook-configuration.yaml (Mutating- and
// ValidatingWebhookConfiguration) and artifacts/deploy/karmada-aggregated-apiserver-
// apiservice.yaml (the APIService and its ExternalName Service).
func (r Render) Registration() (webhooks, apiService []*unstructured.Unstructured, err error) {
	webhooks, err = r.load(filepath.Join(r.Dir, "deploy", "webhook-configuration.yaml"))
	if err != nil {
		return nil, nil, err
	}
	apiService, err = r.load(filepath.Join(r.Dir, "deploy", "karmada-aggregated-apiserver-apiservice.yaml"))
	if err != nil {
		return nil, nil, err
	}
	loopback := "https://127.0.0.1:" + strconv.Itoa(r.WebhookPort) + "/"
	for _, w := range webhooks {
		hooks, _, _ := unstructured.NestedSlice(w.Object, "webhooks")
		for _, h := range hooks {
			hm, _ := h.(map[string]any)
			url, _, _ := unstructured.NestedString(hm, "clientConfig", "url")
			if !strings.HasPrefix(url, loopback) {
				return nil, nil, fmt.Errorf("karmada manifests: webhook %v still calls %q (not 127.0.0.1)", hm["name"], url)
			}
		}
	}
	for _, o := range apiService {
		switch o.GetKind() {
		case "APIService":
			if err := unstructured.SetNestedField(o.Object, int64(r.AggregatedAPIServerPort), "spec", "service", "port"); err != nil {
				return nil, nil, err
			}
		case "Service":
			if err := unstructured.SetNestedField(o.Object, "127.0.0.1", "spec", "externalName"); err != nil {
				return nil, nil, err
			}
		}
	}
	return webhooks, apiService, nil
}

// load reads a multi-document YAML file, fills Karmada's placeholders and checks that none
// is left.
func (r Render) load(path string) ([]*unstructured.Unstructured, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("karmada manifests: %w (build them with testenv/build.sh karmada-crds)", err)
	}
	s := string(b)
	webhook := "https://127.0.0.1:" + strconv.Itoa(r.WebhookPort)
	s = strings.ReplaceAll(s, webhookServiceURL, webhook)
	// The CRD patches' form of the same URL (hack/deploy-karmada.sh fills name/namespace).
	s = strings.ReplaceAll(s, "https://{{name}}.{{namespace}}.svc:443", webhook)
	s = strings.ReplaceAll(s, "{{caBundle}}", base64.StdEncoding.EncodeToString(r.CABundle))
	if i := strings.Index(s, "{{"); i >= 0 {
		end := min(len(s), i+40)
		return nil, fmt.Errorf("karmada manifests: %s: unknown placeholder at %q", path, s[i:end])
	}
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(s)), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("karmada manifests: %s: %w", path, err)
		}
		if len(obj) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
	return out, nil
}

// merge applies a strategic-merge patch without list directives (all kustomize needs for
// the CRD patches, which only add spec.conversion): maps merge, anything else replaces.
func merge(dst, patch map[string]any) {
	for k, pv := range patch {
		if pm, ok := pv.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				merge(dm, pm)
				continue
			}
		}
		dst[k] = pv
	}
}
