package karmada

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

var fixture = Render{Dir: "testdata/karmada-crds", CABundle: []byte("PEM"), WebhookPort: 10443, AggregatedAPIServerPort: 10444}

func TestCRDPatchPointsConversionAtLoopbackWebhook(t *testing.T) {
	crds, err := fixture.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	if len(crds) != 1 || crds[0].GetName() != "widgets.example.io" {
		t.Fatalf("CRDs: %v", crds)
	}
	url, _, _ := unstructured.NestedString(crds[0].Object, "spec", "conversion", "webhook", "clientConfig", "url")
	ca, _, _ := unstructured.NestedString(crds[0].Object, "spec", "conversion", "webhook", "clientConfig", "caBundle")
	if url != "https://127.0.0.1:10443/convert" || ca != base64.StdEncoding.EncodeToString([]byte("PEM")) {
		t.Errorf("conversion webhook: url %q caBundle %q", url, ca)
	}
	// The patch merges into the base: nothing of the base is lost.
	if g, _, _ := unstructured.NestedString(crds[0].Object, "spec", "group"); g != "example.io" {
		t.Errorf("spec.group after the patch: %q", g)
	}
	if v, _, _ := unstructured.NestedSlice(crds[0].Object, "spec", "versions"); len(v) != 1 {
		t.Errorf("spec.versions after the patch: %v", v)
	}
}

func TestRegistrationOnLoopback(t *testing.T) {
	webhooks, apiService, err := fixture.Registration()
	if err != nil {
		t.Fatal(err)
	}
	hooks, _, _ := unstructured.NestedSlice(webhooks[0].Object, "webhooks")
	url, _, _ := unstructured.NestedString(hooks[0].(map[string]any), "clientConfig", "url")
	if url != "https://127.0.0.1:10443/mutate-widget" {
		t.Errorf("webhook url %q", url)
	}
	if len(apiService) != 2 {
		t.Fatalf("apiservice file: %d objects", len(apiService))
	}
	port, _, _ := unstructured.NestedInt64(apiService[0].Object, "spec", "service", "port")
	name, _, _ := unstructured.NestedString(apiService[1].Object, "spec", "externalName")
	if port != 10444 || name != "127.0.0.1" {
		t.Errorf("APIService port %d, Service externalName %q", port, name)
	}
}

func TestUnknownPlaceholderIsAnError(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x.yaml"), []byte("a: {{surprise}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := fixture.load(filepath.Join(dir, "x.yaml")); err == nil || !strings.Contains(err.Error(), "{{surprise}}") {
		t.Errorf("want an unknown-placeholder error, got %v", err)
	}
}

// TestRenderKarmadasOwnManifests renders the files build.sh copied from Karmada's module,
// when they are there: every CRD of the kustomization, both binding CRDs with a conversion
// webhook, every webhook on loopback.
func TestRenderKarmadasOwnManifests(t *testing.T) {
	binDir := os.Getenv("TESTENV_BIN_DIR")
	if binDir == "" {
		home, _ := os.UserHomeDir()
		binDir = filepath.Join(home, ".cache", "flotilla", "testenv", "bin")
	}
	r := Render{Dir: filepath.Join(binDir, "karmada-crds"), CABundle: []byte("PEM"), WebhookPort: 1, AggregatedAPIServerPort: 2}
	if _, err := os.Stat(filepath.Join(r.Dir, "VERSION")); err != nil {
		t.Skipf("no karmada-crds in %s (testenv/build.sh karmada-crds)", binDir)
	}
	crds, err := r.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	converted := 0
	for _, c := range crds {
		if s, _, _ := unstructured.NestedString(c.Object, "spec", "conversion", "strategy"); s == "Webhook" {
			converted++
		}
	}
	if len(crds) < 15 || converted != 2 {
		t.Errorf("%d CRDs, %d with a conversion webhook; want >= 15 and 2", len(crds), converted)
	}
	webhooks, _, err := r.Registration()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, w := range webhooks {
		hooks, _, _ := unstructured.NestedSlice(w.Object, "webhooks")
		for _, h := range hooks {
			url, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "url")
			if !strings.HasPrefix(url, "https://127.0.0.1:1/") {
				t.Errorf("webhook url %q", url)
			}
			n++
		}
	}
	if n < 10 {
		t.Errorf("%d webhooks", n)
	}
}
