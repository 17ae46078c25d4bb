package panto

// Structured output in Go: the JSON Schema of a Go type (SchemaOf), and RunAs, which
// runs a turn that must answer with a value of that type. The core does the rest, the
// same in every language: it sends the schema to the provider, validates the answer,
// asks the model to repair a mismatch (Config.OutputRetries times), and fails the turn
// with KindOutputInvalid, KindOutputRefused or KindOutputTruncated when it cannot get
// a valid one (the raw answer in Error.Output).

import (
	"bytes"
	"context"
	"encoding"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// RunOption configures RunAs.
type RunOption func(*runConfig)

type runConfig struct {
	schema json.RawMessage
	turn   TurnOptions
}

// WithSchema makes RunAs send this JSON Schema instead of the one reflected from T (for
// constraints a Go type cannot say: enum, pattern, minimum…). The answer must still
// decode into T with encoding/json.
func WithSchema(schema json.RawMessage) RunOption {
	return func(c *runConfig) { c.schema = schema }
}

// WithTurnOptions gives RunAs's turn these options (Model, Reasoning, Input); their
// OutputSchema is replaced by RunAs's.
func WithTurnOptions(opts TurnOptions) RunOption {
	return func(c *runConfig) { c.turn = opts }
}

// RunAs runs a whole turn whose answer must be JSON matching T's schema, and returns it
// decoded into a T (numbers decoded into an interface are json.Number, exactly as the
// model wrote them):
//
//	type City struct {
//		Name       string `json:"name"`
//		Country    string `json:"country"`
//		Population int    `json:"population,omitempty"`
//	}
//	city, err := panto.RunAs[City](ctx, agent, "The largest city of Japan?")
//
// The schema is SchemaOf[T] unless WithSchema gives one. The turn may call tools first;
// they must all have a Func (RunAs answers no host tool: such a call ends in the tool
// timeout). Errors are Stream's, plus those of the answer: *Error of KindOutputInvalid
// (the answer did not match the schema after the repairs the agent allows, or did not
// decode into T), KindOutputRefused (the model refused) and KindOutputTruncated (the
// answer was cut at max_tokens), each with the raw answer in Error.Output. The
// conversation keeps the turn, as with Stream.
func RunAs[T any](ctx context.Context, a *Agent, input string, opts ...RunOption) (T, error) {
	var zero T
	var c runConfig
	for _, o := range opts {
		o(&c)
	}
	schema := c.schema
	if schema == nil {
		var err error
		if schema, err = SchemaOf[T](); err != nil {
			return zero, err
		}
	}
	turn := c.turn
	turn.OutputSchema = schema
	s, err := a.StreamWith(ctx, input, turn)
	if err != nil {
		return zero, err
	}
	defer s.Close()
	var done *MessageComplete
	for {
		ev, err := s.Next()
		if errors.Is(err, ErrDone) {
			break
		}
		if err != nil {
			return zero, err
		}
		if mc, ok := ev.(*MessageComplete); ok {
			done = mc
		}
	}
	if done == nil || done.Output == nil {
		return zero, &Error{Kind: KindInternal, Message: "the turn ended without its structured output"}
	}
	var out T
	// UseNumber: a number that lands in an interface (map[string]any, any fields) is
	// the json.Number the model wrote, not a float64 that rounds big integers and long
	// fractions.
	dec := json.NewDecoder(bytes.NewReader(done.Output))
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		raw := done.Text
		if raw == "" {
			raw = string(done.Output)
		}
		return zero, &Error{Kind: KindOutputInvalid, Message: "the output does not decode into " + typeName(reflect.TypeFor[T]()) + ": " + err.Error(), Output: raw}
	}
	return out, nil
}

// SchemaOf returns the JSON Schema RunAs sends for a T: an object schema reflected from
// a struct type (or a map with string keys), titled with the type's name.
//
// Fields follow encoding/json: the json tag's name (or the field's), "-" and unexported
// fields left out, embedded structs' fields promoted. A field is required unless its
// tag says omitempty or omitzero or its type is a pointer. A `description:"…"` struct
// tag describes the field to the model. Types: string; bool; integers ("integer");
// floats ("number"); slices and arrays ("array"; []byte is a base64 "string");
// maps with string keys ("object" with additionalProperties, which OpenAI's strict mode
// refuses: a config error there; other providers and output_mode "tool" take it);
// structs (nested ones named under $defs, which allows recursive types); time.Time (a
// "date-time" string);
// encoding.TextMarshaler types ("string"); pointers as their element; interfaces and
// json.RawMessage accept anything ({}). Channels, functions and complex numbers are an
// *Error of KindConfig naming the field.
func SchemaOf[T any]() (json.RawMessage, error) {
	t := reflect.TypeFor[T]()
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || !(t.Kind() == reflect.Struct && t != timeType || t.Kind() == reflect.Map) {
		return nil, &Error{Kind: KindConfig, Message: "output: " + typeName(t) + " is not a struct or a map (give its JSON Schema with WithSchema)"}
	}
	r := reflector{defs: map[string]any{}, names: map[reflect.Type]string{}}
	root, err := r.inline(t, typeName(t))
	if err != nil {
		return nil, err
	}
	if len(r.defs) > 0 {
		root["$defs"] = r.defs
	}
	if name := t.Name(); titlePattern.MatchString(name) {
		root["title"] = name
	}
	js, err := json.Marshal(root)
	if err != nil {
		return nil, &Error{Kind: KindInternal, Message: "output: cannot encode the schema: " + err.Error()}
	}
	return js, nil
}

var (
	titlePattern  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	timeType      = reflect.TypeFor[time.Time]()
	rawType       = reflect.TypeFor[json.RawMessage]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

func typeName(t reflect.Type) string {
	if t == nil {
		return "nil"
	}
	return t.String()
}

// reflector builds one schema: named struct types go under defs once each (by a name
// unique within the schema), so recursive types end in a $ref.
type reflector struct {
	defs  map[string]any
	names map[reflect.Type]string
}

// inline is the schema of t written in place (the root, and unnamed structs).
func (r *reflector) inline(t reflect.Type, path string) (map[string]any, error) {
	if t.Kind() == reflect.Struct {
		return r.object(t, path)
	}
	return r.of(t, path)
}

func (r *reflector) of(t reflect.Type, path string) (map[string]any, error) {
	if t == rawType {
		return map[string]any{}, nil
	}
	if t == timeType {
		return map[string]any{"type": "string", "format": "date-time"}, nil
	}
	if t.Kind() != reflect.Pointer && t.Kind() != reflect.Interface &&
		(t.Implements(textMarshaler) || reflect.PointerTo(t).Implements(textMarshaler)) {
		return map[string]any{"type": "string"}, nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		return r.of(t.Elem(), path)
	case reflect.Interface:
		return map[string]any{}, nil
	case reflect.String:
		return map[string]any{"type": "string"}, nil
	case reflect.Bool:
		return map[string]any{"type": "boolean"}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return map[string]any{"type": "integer"}, nil
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}, nil
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 && t.Kind() == reflect.Slice {
			return map[string]any{"type": "string"}, nil // encoding/json's base64
		}
		items, err := r.of(t.Elem(), path+"[]")
		if err != nil {
			return nil, err
		}
		return map[string]any{"type": "array", "items": items}, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, &Error{Kind: KindConfig, Message: "output: " + path + ": map keys must be strings (JSON object keys), not " + t.Key().String()}
		}
		values, err := r.of(t.Elem(), path+"[]")
		if err != nil {
			return nil, err
		}
		return map[string]any{"type": "object", "additionalProperties": values}, nil
	case reflect.Struct:
		if t.Name() == "" {
			return r.object(t, path)
		}
		name, ok := r.names[t]
		if !ok {
			name = r.unique(t.Name())
			r.names[t] = name
			r.defs[name] = map[string]any{} // taken before building: t may refer to itself
			obj, err := r.object(t, path)
			if err != nil {
				return nil, err
			}
			r.defs[name] = obj
		}
		return map[string]any{"$ref": "#/$defs/" + name}, nil
	}
	return nil, &Error{Kind: KindConfig, Message: "output: " + path + ": " + t.String() + " has no JSON form"}
}

func (r *reflector) unique(name string) string {
	if _, taken := r.defs[name]; !taken {
		return name
	}
	for n := 2; ; n++ {
		candidate := name + strconv.Itoa(n)
		if _, taken := r.defs[candidate]; !taken {
			return candidate
		}
	}
}

type field struct {
	name     string
	index    []int
	typ      reflect.Type
	optional bool
	doc      string
	tagged   bool
}

// object is the schema of a struct's fields, as encoding/json reads them.
func (r *reflector) object(t reflect.Type, path string) (map[string]any, error) {
	fields := jsonFields(t)
	props := map[string]any{}
	required := []string{}
	for _, f := range fields {
		s, err := r.of(f.typ, path+"."+f.name)
		if err != nil {
			return nil, err
		}
		if f.doc != "" {
			if _, isRef := s["$ref"]; isRef {
				s = map[string]any{"allOf": []any{s}, "description": f.doc}
			} else {
				s["description"] = f.doc
			}
		}
		props[f.name] = s
		if !f.optional {
			required = append(required, f.name)
		}
	}
	return map[string]any{"type": "object", "properties": props, "required": required}, nil
}

// jsonFields lists a struct's fields as encoding/json sees them: promoted fields of
// embedded structs, a shallower (or tagged) field winning over a deeper one of the same
// name, names in declaration order.
func jsonFields(t reflect.Type) []field {
	var all []field
	var walk func(t reflect.Type, index []int, seen map[reflect.Type]bool)
	walk = func(t reflect.Type, index []int, seen map[reflect.Type]bool) {
		if seen[t] {
			return
		}
		seen[t] = true
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			tag := sf.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			ft := sf.Type
			if sf.Anonymous {
				et := ft
				if et.Kind() == reflect.Pointer {
					et = et.Elem()
				}
				if name == "" && et.Kind() == reflect.Struct {
					walk(et, append(append([]int{}, index...), i), seen)
					continue
				}
				if !sf.IsExported() && et.Kind() != reflect.Struct {
					continue
				}
			} else if !sf.IsExported() {
				continue
			}
			f := field{
				name:   name,
				index:  append(append([]int{}, index...), i),
				typ:    ft,
				doc:    sf.Tag.Get("description"),
				tagged: name != "",
			}
			if f.name == "" {
				f.name = sf.Name
			}
			for _, o := range strings.Split(opts, ",") {
				if o == "omitempty" || o == "omitzero" {
					f.optional = true
				}
			}
			if ft.Kind() == reflect.Pointer {
				f.optional = true
			}
			all = append(all, f)
		}
		delete(seen, t)
	}
	walk(t, nil, map[reflect.Type]bool{})
	// encoding/json's rule for duplicate names: the shallowest wins, a tagged one among
	// equals; a tie leaves the name out.
	byName := map[string][]field{}
	var order []string
	for _, f := range all {
		if _, ok := byName[f.name]; !ok {
			order = append(order, f.name)
		}
		byName[f.name] = append(byName[f.name], f)
	}
	var out []field
	for _, name := range order {
		fs := byName[name]
		sort.SliceStable(fs, func(i, j int) bool {
			if len(fs[i].index) != len(fs[j].index) {
				return len(fs[i].index) < len(fs[j].index)
			}
			return fs[i].tagged && !fs[j].tagged
		})
		if len(fs) > 1 && len(fs[0].index) == len(fs[1].index) && fs[0].tagged == fs[1].tagged {
			continue
		}
		out = append(out, fs[0])
	}
	return out
}
