package panto

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Config, its nested types (Retry, Timeouts, Tool, …) and their MarshalJSON methods are
// generated into config_gen.go from the core's vocabulary (scripts/gen.sh); the rules
// that map a configuration key to a Go field are written in scripts/gen/golang.py.

// Bool returns a pointer to b, for Config.PromptCaching.
func Bool(b bool) *bool { return &b }

// Float returns a pointer to x, for Config.Temperature.
func Float(x float64) *float64 { return &x }

// Int returns a pointer to n, for Retry.MaxRetries (Int(0): no retry).
func Int(n int) *int { return &n }

// configJSON is the JSON object the core validates; zero values are left out.
func (c *Config) configJSON() ([]byte, error) { return c.MarshalJSON() }

// jsonObject writes one JSON object key by key, in the order of the calls (the
// generated MarshalJSON methods write the keys in the schema's order).
type jsonObject struct {
	buf bytes.Buffer
	err error
}

func (o *jsonObject) put(key string, v any) {
	if o.err != nil {
		return
	}
	if o.buf.Len() == 0 {
		o.buf.WriteByte('{')
	} else {
		o.buf.WriteByte(',')
	}
	k, _ := json.Marshal(key) // a string always marshals
	o.buf.Write(k)
	o.buf.WriteByte(':')
	js, err := json.Marshal(v)
	if err != nil {
		o.err = err
		return
	}
	o.buf.Write(js)
}

func (o *jsonObject) end() ([]byte, error) {
	if o.err != nil {
		return nil, o.err
	}
	if o.buf.Len() == 0 {
		return []byte("{}"), nil
	}
	o.buf.WriteByte('}')
	return o.buf.Bytes(), nil
}

// errUnknownKey is what readObject reports for a key no field has.
var errUnknownKey = errors.New("unknown key")

// readObject calls field for every key of the JSON object data; an error names the key.
func readObject(data []byte, field func(key string, v json.RawMessage) error) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first error does not depend on map order
	for _, k := range keys {
		if err := field(k, m[k]); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	return nil
}

// readMillis reads a count of milliseconds into a Duration (null leaves it).
func readMillis(v json.RawMessage, d *time.Duration) error {
	var ms *int64
	if err := json.Unmarshal(v, &ms); err != nil {
		return err
	}
	if ms != nil {
		*d = time.Duration(*ms) * time.Millisecond
	}
	return nil
}

// goFieldPath turns a key path of the core's errors ("retry.max_retries",
// "tools[1].name", "headers.X-Name") into the field path below root ("Config" or
// "TurnOptions"): "Config.Retry.MaxRetries", "Config.Tools[1].Name",
// `Config.Headers["X-Name"]`. False for a path that names no field.
func goFieldPath(root, path string) (string, bool) {
	var indices []string
	var key strings.Builder
	for rest := path; rest != ""; {
		open := strings.IndexByte(rest, '[')
		if open < 0 {
			key.WriteString(rest)
			break
		}
		end := strings.IndexByte(rest[open:], ']')
		if end < 0 {
			return "", false
		}
		indices = append(indices, rest[open:open+end+1])
		key.WriteString(rest[:open] + "[]")
		rest = rest[open+end+1:]
	}
	k := key.String()
	field, ok := configFields[k]
	entry := ""
	if !ok { // an entry of a map: the map's path, a dot, the entry's key
		for m := range configMaps {
			if e, found := strings.CutPrefix(k, m+"."); found && e != "" {
				field, entry, ok = configFields[m], e, true
				break
			}
		}
		if !ok {
			return "", false
		}
	}
	for _, ix := range indices {
		if !strings.Contains(field, "[]") {
			return "", false
		}
		field = strings.Replace(field, "[]", ix, 1)
	}
	if entry != "" {
		field += "[" + strconv.Quote(entry) + "]"
	}
	return root + "." + field, true
}

// withGoField puts the Go field that a config error's key path stands for before the
// path ("Config.Retry.MaxRetries (retry.max_retries): at most 100 (got 101)"): the
// core names the JSON key, which a Go program never wrote. The core's path starts with
// prefix ("options." for a turn's options) before the key.
func withGoField(e *Error, root, prefix string) *Error {
	if e == nil || e.Kind != KindConfig {
		return e
	}
	path, rest, ok := strings.Cut(e.Message, ": ")
	if !ok {
		return e
	}
	key, ok := strings.CutPrefix(path, prefix)
	if !ok {
		return e
	}
	if field, ok := goFieldPath(root, key); ok {
		e.Message = field + " (" + path + "): " + rest
	}
	return e
}
