// Command kubefed-versions prints the versions KubeFed v0.10.0's sync controller records in a
// PropagatedVersion (templateVersion, overridesVersion) for federated objects, computed by
// KubeFed's own code (sigs.k8s.io/kubefed/pkg/controller/sync). Flotilla's tests compare its
// PropagatedVersions and its own hash code with this output.
//
//	kubefed-versions < objects.json          # a JSON array of federated objects (or one object)
//	kubefed-versions -vectors FILE           # check FILE's expected values; exit 1 on a mismatch
//	kubefed-versions -vectors FILE -write    # rewrite FILE's expected values
//
// Objects are decoded as KubeFed's informers decode them (unstructured JSON: integers become
// int64, other numbers float64).
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kfsync "sigs.k8s.io/kubefed/pkg/controller/sync"
)

// Versions is what KubeFed writes in a PropagatedVersion's status for one federated object.
type Versions struct {
	TemplateVersion  string `json:"templateVersion"`
	OverridesVersion string `json:"overridesVersion"`
}

// Vector is one entry of a vectors file: a federated object and the versions KubeFed computes.
type Vector struct {
	Name             string          `json:"name"`
	Object           json.RawMessage `json:"object"`
	TemplateVersion  string          `json:"templateVersion"`
	OverridesVersion string          `json:"overridesVersion"`
}

func versionsOf(raw []byte) (Versions, error) {
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(raw); err != nil {
		return Versions{}, fmt.Errorf("decoding the object: %w", err)
	}
	t, err := kfsync.GetTemplateHash(obj.Object)
	if err != nil {
		return Versions{}, err
	}
	o, err := kfsync.GetOverrideHash(obj)
	if err != nil {
		return Versions{}, err
	}
	return Versions{TemplateVersion: t, OverridesVersion: o}, nil
}

func main() {
	vectors := flag.String("vectors", "", "a vectors file to check (or rewrite with -write)")
	write := flag.Bool("write", false, "rewrite the expected values of -vectors")
	flag.Parse()
	if *vectors != "" {
		if err := checkVectors(*vectors, *write); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var items []json.RawMessage
	if trimmed := bytes.TrimSpace(in); len(trimmed) > 0 && trimmed[0] == '[' {
		err = json.Unmarshal(trimmed, &items)
	} else {
		items = []json.RawMessage{trimmed}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "reading the objects:", err)
		os.Exit(1)
	}
	out := make([]Versions, 0, len(items))
	for i, raw := range items {
		v, err := versionsOf(raw)
		if err != nil {
			fmt.Fprintf(os.Stderr, "object %d: %v\n", i, err)
			os.Exit(1)
		}
		out = append(out, v)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(out)
}

func checkVectors(path string, write bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var vs []Vector
	if err := json.Unmarshal(data, &vs); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	bad := 0
	for i := range vs {
		got, err := versionsOf(vs[i].Object)
		if err != nil {
			return fmt.Errorf("%s: vector %q: %w", path, vs[i].Name, err)
		}
		if got.TemplateVersion != vs[i].TemplateVersion || got.OverridesVersion != vs[i].OverridesVersion {
			if !write {
				fmt.Fprintf(os.Stderr, "vector %q: file says %s/%s, KubeFed computes %s/%s\n", vs[i].Name,
					vs[i].TemplateVersion, vs[i].OverridesVersion, got.TemplateVersion, got.OverridesVersion)
			}
			bad++
		}
		vs[i].TemplateVersion, vs[i].OverridesVersion = got.TemplateVersion, got.OverridesVersion
	}
	if write {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(vs); err != nil {
			return err
		}
		return os.WriteFile(path, buf.Bytes(), 0o644)
	}
	if bad > 0 {
		return fmt.Errorf("%s: %d of %d vectors differ from KubeFed v0.10.0 (rewrite with -write)", path, bad, len(vs))
	}
	return nil
}
