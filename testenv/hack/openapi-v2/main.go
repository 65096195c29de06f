// Command openapi-v2 checks an OpenAPI v2 document served as gnostic protobuf
// (application/com.github.proto-openapi.spec.v2@v1.0+protobuf) against the same document
// served as JSON: the protobuf bytes must decode with gnostic-models' openapi_v2 package into
// the document gnostic's own compiler makes of the JSON, and kube-openapi (what kubectl builds
// its models with) must accept it. Vendor extensions and other free-form values travel as
// YAML text; they are compared as the values they parse to, not as text.
//
//	cd testenv && go run ./hack/openapi-v2 -pb doc.pb -json doc.json
//
// Exits 0 and prints a summary when they agree; exits 1 naming the first difference.
package main

import (
	"flag"
	"fmt"
	"os"
	"reflect"

	openapi_v2 "github.com/google/gnostic-models/openapiv2"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"
	kubeproto "k8s.io/kube-openapi/pkg/util/proto"
)

func main() {
	pbPath := flag.String("pb", "", "the protobuf document")
	jsonPath := flag.String("json", "", "the JSON document")
	dump := flag.Bool("dump-any", false, "print the YAML text of the first vendor extensions")
	flag.Parse()
	pb, err := os.ReadFile(*pbPath)
	check(err)
	var decoded openapi_v2.Document
	check(proto.Unmarshal(pb, &decoded))
	if *dump {
		n := 0
		for _, d := range decoded.GetDefinitions().GetAdditionalProperties() {
			for _, e := range d.GetValue().GetVendorExtension() {
				fmt.Printf("%s %s: %q\n", d.GetName(), e.GetName(), e.GetValue().GetYaml())
				n++
			}
			for _, e := range d.GetValue().GetEnum() {
				fmt.Printf("%s enum: %q\n", d.GetName(), e.GetYaml())
			}
			if n > 5 {
				break
			}
		}
	}
	if *jsonPath != "" {
		js, err := os.ReadFile(*jsonPath)
		check(err)
		compiled, err := openapi_v2.ParseDocument(js)
		check(err)
		a, b := plain(&decoded), plain(compiled)
		if path, ok := same(a, b, "$"); !ok {
			fmt.Fprintf(os.Stderr, "protobuf and JSON differ at %s\n", path)
			os.Exit(1)
		}
	}
	models, err := kubeproto.NewOpenAPIData(&decoded)
	check(err)
	fmt.Printf("ok: %d definitions, %d models\n", len(decoded.GetDefinitions().GetAdditionalProperties()), len(models.ListModels()))
}

// plain is a document as plain values: its YAML tree, decoded.
func plain(d *openapi_v2.Document) any {
	node := d.ToRawInfo()
	text, err := yaml.Marshal(node)
	check(err)
	var v any
	check(yaml.Unmarshal(text, &v))
	return v
}

func same(a, b any, path string) (string, bool) {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok {
			return path, false
		}
		for k := range x {
			if _, ok := y[k]; !ok {
				return path + "." + k + " (only in protobuf)", false
			}
		}
		for k := range y {
			if _, ok := x[k]; !ok {
				return path + "." + k + " (only in JSON)", false
			}
			if p, ok := same(x[k], y[k], path+"."+k); !ok {
				return p, false
			}
		}
		return "", true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return path, false
		}
		for i := range x {
			if p, ok := same(x[i], y[i], fmt.Sprintf("%s[%d]", path, i)); !ok {
				return p, false
			}
		}
		return "", true
	default:
		if !reflect.DeepEqual(a, b) {
			return fmt.Sprintf("%s (%v != %v)", path, a, b), false
		}
		return "", true
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
