// Command zero-values prints, for every built-in kind client-go's scheme knows (and
// apiextensions.k8s.io/v1's CustomResourceDefinition), the JSON of its
// zero value as the API server's field manager sees it: the "live object" a create is compared
// with when kube-apiserver records field ownership (managedFields). Fields Go always writes
// (structs, and fields without omitempty) are present; the rest are absent.
//
//	cd testenv && go run ./hack/zero-values > ../crates/flotilla-api/data/zero-values.json
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

func main() {
	// CustomResourceDefinitions are built in too, though not in client-go's scheme.
	if err := apiextensionsv1.AddToScheme(scheme.Scheme); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	out := map[string]json.RawMessage{}
	for gvk, t := range scheme.Scheme.AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal || strings.HasSuffix(gvk.Kind, "List") || strings.HasSuffix(gvk.Kind, "Options") {
			continue
		}
		obj, ok := reflect.New(t).Interface().(runtime.Object)
		if !ok {
			continue
		}
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			fmt.Fprintln(os.Stderr, gvk, err)
			os.Exit(1)
		}
		delete(u, "apiVersion")
		delete(u, "kind")
		b, err := json.Marshal(u)
		if err != nil {
			fmt.Fprintln(os.Stderr, gvk, err)
			os.Exit(1)
		}
		group := gvk.Group
		if group == "" {
			group = "core"
		}
		out[group+"/"+gvk.Version+"/"+gvk.Kind] = b
	}
	keys := make([]string, 0, len(out))
	for k := range out {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Println("{")
	for i, k := range keys {
		sep := ","
		if i == len(keys)-1 {
			sep = ""
		}
		fmt.Printf("  %q: %s%s\n", k, out[k], sep)
	}
	fmt.Println("}")
}
