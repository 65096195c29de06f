// Command proto-schema writes, for every built-in kind client-go's scheme knows, the protobuf
// layout of its Go type as a data table the Rust API server decodes protobuf request bodies
// with (kubectl ≥ 1.32 sends them), and fixtures to check that decoder against Go itself.
//
// The table is read off the Go types by reflection: each field's `protobuf:"…"` tag gives its
// number and repetition, its `json:"…"` tag its JSON name and omitempty/omitzero/inline, its
// Go type whether it is a pointer and what it holds. Types with their own JSON form (Time,
// MicroTime, Duration, Quantity, IntOrString, RawExtension, FieldsV1) are named, not walked.
//
// The fixtures are objects filled with deterministic random values (and each kind's zero
// value), encoded by apimachinery's protobuf serializer, decoded back by it, and written as
// JSON by encoding/json: the JSON a Go client would have sent for the same object. Lists are
// left out, and option kinds (DeleteOptions, …) but those of the core group.
//
//	cd testenv && go run ./hack/proto-schema -schema ../crates/flotilla-apiserver/data/protobuf-schema.json \
//	    -fixtures ../crates/flotilla-apiserver/tests/data/protobuf-fixtures.jsonl
package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/randfill"
)

// special names the types whose JSON is their own (a MarshalJSON method), decoded by hand.
var special = map[reflect.Type]string{
	reflect.TypeOf(metav1.Time{}):          "Time",
	reflect.TypeOf(metav1.MicroTime{}):     "MicroTime",
	reflect.TypeOf(metav1.Duration{}):      "Duration",
	reflect.TypeOf(resource.Quantity{}):    "Quantity",
	reflect.TypeOf(intstr.IntOrString{}):   "IntOrString",
	reflect.TypeOf(runtime.RawExtension{}): "RawExtension",
	reflect.TypeOf(metav1.FieldsV1{}):      "FieldsV1",
}

// Field is one field of a message: n is the protobuf field number (0: not in the protobuf
// message, always its zero value), j the JSON name, t the element type (a scalar name, a
// special name, "map" or a message name; scalars are string, bool, int32, int64, bytes), r repeated, p a Go pointer, o "empty" (omitempty)
// or "zero" (omitzero), i inlined into the parent's JSON, k/v a map's key and value types.
type Field struct {
	N int    `json:"n"`
	J string `json:"j,omitempty"`
	T string `json:"t"`
	R bool   `json:"r,omitempty"`
	P bool   `json:"p,omitempty"`
	O string `json:"o,omitempty"`
	I bool   `json:"i,omitempty"`
	K string `json:"k,omitempty"`
	V string `json:"v,omitempty"`
}

// Type is a message: its fields, or (list) the element type of a named slice the protobuf
// wraps in a message with one repeated field 1 (ExtraValue, Verbs).
type Type struct {
	Fields []Field `json:"fields,omitempty"`
	List   string  `json:"list,omitempty"`
}

var types = map[string]*Type{}

func typeName(t reflect.Type) string {
	p := t.PkgPath()
	p = strings.TrimPrefix(p, "k8s.io/api/")
	p = strings.TrimPrefix(p, "k8s.io/apimachinery/pkg/")
	return p + "." + t.Name()
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

// elem names a value type for the table, walking messages it has not seen.
func elem(t reflect.Type, where string) string {
	if s, ok := special[t]; ok {
		return s
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "bool"
	case reflect.Int32:
		return "int32"
	case reflect.Int64:
		return "int64"
	case reflect.Struct:
		walk(t)
		return typeName(t)
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "bytes"
		}
		if t.Name() != "" {
			if _, ok := reflect.PointerTo(t).MethodByName("Unmarshal"); ok {
				name := typeName(t)
				if _, seen := types[name]; !seen {
					types[name] = &Type{}
					types[name].List = elem(t.Elem(), where)
				}
				return name
			}
		}
	}
	fail("%s: unsupported Go type %s", where, t)
	return ""
}

func walk(t reflect.Type) {
	name := typeName(t)
	if _, seen := types[name]; seen {
		return
	}
	out := &Type{Fields: []Field{}}
	types[name] = out
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		where := name + "." + sf.Name
		var f Field
		jtag := sf.Tag.Get("json")
		parts := strings.Split(jtag, ",")
		if parts[0] == "-" && len(parts) == 1 {
			continue
		}
		f.J = parts[0]
		for _, o := range parts[1:] {
			switch o {
			case "omitempty":
				f.O = "empty"
			case "omitzero":
				f.O = "zero"
			}
		}
		// encoding/json inlines an embedded struct without a JSON name (",inline" is only
		// a convention, not an option it reads).
		if f.J == "" {
			if sf.Anonymous && sf.Type.Kind() == reflect.Struct {
				f.I = true
			} else {
				f.J = sf.Name
			}
		}
		if ptag := sf.Tag.Get("protobuf"); ptag != "" {
			p := strings.Split(ptag, ",")
			n, err := strconv.Atoi(p[1])
			if err != nil {
				fail("%s: bad protobuf tag %q", where, ptag)
			}
			f.N = n
		}
		ft := sf.Type
		if ft.Kind() == reflect.Pointer {
			f.P = true
			ft = ft.Elem()
		}
		_, isSpecial := special[ft]
		switch {
		case isSpecial:
			f.T = special[ft]
		case ft.Kind() == reflect.Map:
			if ft.Key().Kind() != reflect.String {
				fail("%s: map key %s", where, ft.Key())
			}
			f.T, f.K, f.V = "map", "string", elem(ft.Elem(), where)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() != reflect.Uint8 && !(ft.Name() != "" && hasUnmarshal(ft)):
			f.R = true
			et := ft.Elem()
			if et.Kind() == reflect.Pointer {
				fail("%s: slice of pointers", where)
			}
			f.T = elem(et, where)
		default:
			f.T = elem(ft, where)
		}
		if f.N == 0 && !(sf.Anonymous && sf.Type == reflect.TypeOf(metav1.TypeMeta{})) && f.O == "" {
			// A field Go writes to JSON but the protobuf message lacks: its zero value is
			// written, which the decoder does; note it so a new one is looked at.
			fmt.Fprintf(os.Stderr, "note: %s has no protobuf tag\n", where)
		}
		out.Fields = append(out.Fields, f)
	}
}

func hasUnmarshal(t reflect.Type) bool {
	_, ok := reflect.PointerTo(t).MethodByName("Unmarshal")
	return ok
}

func gvkKey(gvk schema.GroupVersionKind) string {
	g := gvk.Group
	if g == "" {
		g = "core"
	}
	return g + "/" + gvk.Version + "/" + gvk.Kind
}

var quantities = []string{"0", "1", "100m", "1.5", "2Gi", "500Mi", "1e3", "12345678901", "0.001", "-3"}

func filler(seed int64) *randfill.Filler {
	return randfill.New().RandSource(rand.NewSource(seed)).NilChance(0.4).NumElements(1, 1).MaxDepth(12).Funcs(
		func(tm *metav1.TypeMeta, c randfill.Continue) {},
		func(q *resource.Quantity, c randfill.Continue) {
			*q = resource.MustParse(quantities[c.Intn(len(quantities))])
		},
		func(t *metav1.Time, c randfill.Continue) {
			*t = metav1.Time{Time: time.Unix(c.Int63n(4e9), c.Int63n(1e9))}
		},
		func(t *metav1.MicroTime, c randfill.Continue) {
			*t = metav1.MicroTime{Time: time.Unix(c.Int63n(4e9), c.Int63n(1e9))}
		},
		func(d *metav1.Duration, c randfill.Continue) {
			d.Duration = time.Duration(c.Int63n(1e14) - 1e12)
		},
		func(v *intstr.IntOrString, c randfill.Continue) {
			if c.Bool() {
				*v = intstr.FromInt32(c.Int31() - 1<<30)
			} else {
				*v = intstr.FromString(c.String(8))
			}
		},
		func(r *runtime.RawExtension, c randfill.Continue) {
			r.Raw = []byte(fmt.Sprintf(`{"apiVersion":"example.com/v1","kind":"Thing","n":%d,"s":%q}`, c.Intn(1000), c.String(5)))
		},
		func(f *metav1.FieldsV1, c randfill.Continue) {
			f.Raw = []byte(fmt.Sprintf(`{"f:metadata":{"f:labels":{"f:%s":{}}}}`, "k"+strconv.Itoa(c.Intn(100))))
		},
	)
}

type fixture struct {
	Kind string          `json:"kind"`
	PB   string          `json:"pb"`
	JSON json.RawMessage `json:"json"`
}

func main() {
	schemaPath := flag.String("schema", "", "where to write the schema table")
	fixturesPath := flag.String("fixtures", "", "where to write the fixtures (JSON lines)")
	flag.Parse()

	kinds := map[string]string{}
	var gvks []schema.GroupVersionKind
	for gvk, t := range scheme.Scheme.AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal {
			continue
		}
		if _, ok := reflect.New(t).Interface().(interface{ Unmarshal([]byte) error }); !ok {
			continue
		}
		walk(t)
		kinds[gvkKey(gvk)] = typeName(t)
		gvks = append(gvks, gvk)
	}
	sort.Slice(gvks, func(i, j int) bool { return gvkKey(gvks[i]) < gvkKey(gvks[j]) })

	if *schemaPath != "" {
		var b bytes.Buffer
		b.WriteString("{\n\"kinds\": ")
		kj, _ := json.Marshal(kinds)
		b.Write(kj)
		b.WriteString(",\n\"types\": {\n")
		names := make([]string, 0, len(types))
		for n := range types {
			names = append(names, n)
		}
		sort.Strings(names)
		for i, n := range names {
			tj, _ := json.Marshal(types[n])
			fmt.Fprintf(&b, "%q: %s", n, tj)
			if i < len(names)-1 {
				b.WriteString(",")
			}
			b.WriteString("\n")
		}
		b.WriteString("}\n}\n")
		if err := os.WriteFile(*schemaPath, b.Bytes(), 0o644); err != nil {
			fail("%v", err)
		}
	}

	if *fixturesPath != "" {
		pb := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
		var b bytes.Buffer
		for i, gvk := range gvks {
			if strings.HasSuffix(gvk.Kind, "List") || (strings.HasSuffix(gvk.Kind, "Options") && gvk.Group != "") || gvk.Kind == "WatchEvent" {
				continue
			}
			for variant := 0; variant < 2; variant++ {
				obj, err := scheme.Scheme.New(gvk)
				if err != nil {
					fail("%v", err)
				}
				if variant > 0 {
					filler(int64(i*7 + variant)).Fill(obj)
				}
				obj.GetObjectKind().SetGroupVersionKind(gvk)
				var enc bytes.Buffer
				if err := pb.Encode(obj, &enc); err != nil {
					fail("%s: encode: %v", gvk, err)
				}
				back, err := scheme.Scheme.New(gvk)
				if err != nil {
					fail("%v", err)
				}
				if _, _, err := pb.Decode(enc.Bytes(), nil, back); err != nil {
					fail("%s: decode: %v", gvk, err)
				}
				back.GetObjectKind().SetGroupVersionKind(gvk)
				j, err := json.Marshal(back)
				if err != nil {
					fail("%s: json: %v", gvk, err)
				}
				line, _ := json.Marshal(fixture{Kind: gvkKey(gvk), PB: base64.StdEncoding.EncodeToString(enc.Bytes()), JSON: j})
				b.Write(line)
				b.WriteString("\n")
			}
		}
		if err := os.WriteFile(*fixturesPath, b.Bytes(), 0o644); err != nil {
			fail("%v", err)
		}
	}
}
