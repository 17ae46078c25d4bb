package panto

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

type landmark struct {
	Name string `json:"name"`
	Year *int   `json:"year"`
}

type City struct {
	Name       string     `json:"name" description:"The city's name"`
	Population int        `json:"population"`
	Landmarks  []landmark `json:"landmarks"`
	Founded    time.Time  `json:"founded"`
	Nickname   string     `json:"nickname,omitempty"`
	Internal   string     `json:"-"`
	unexported int
}

// tagged has a map: an object with additionalProperties (which OpenAI's strict mode
// refuses; other providers and output_mode "tool" take it).
type tagged struct {
	Tags  map[string]string `json:"tags,omitempty"`
	Count map[string]int    `json:"count"`
}

func TestSchemaOfAStruct(t *testing.T) {
	js, err := SchemaOf[City]()
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"title": "City",
		"type":  "object",
		"properties": map[string]any{
			"name":       map[string]any{"type": "string", "description": "The city's name"},
			"population": map[string]any{"type": "integer"},
			"landmarks":  map[string]any{"type": "array", "items": map[string]any{"$ref": "#/$defs/landmark"}},
			"founded":    map[string]any{"type": "string", "format": "date-time"},
			"nickname":   map[string]any{"type": "string"},
		},
		"required": []any{"name", "population", "landmarks", "founded"},
		"$defs": map[string]any{"landmark": map[string]any{
			"type": "object",
			"properties": map[string]any{
				"name": map[string]any{"type": "string"},
				"year": map[string]any{"type": "integer"},
			},
			"required": []any{"name"},
		}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("schema:\n got %s\nwant %s", js, mustJSON(t, want))
	}
}

type node struct {
	Value    int     `json:"value"`
	Children []*node `json:"children"`
}

type embedded struct {
	ID string `json:"id"`
}

type withEmbedded struct {
	embedded
	Name string `json:"name"`
}

func TestSchemaOfMaps(t *testing.T) {
	js, err := SchemaOf[tagged]()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"properties":{"count":{"additionalProperties":{"type":"integer"},"type":"object"},"tags":{"additionalProperties":{"type":"string"},"type":"object"}},"required":["count"],"title":"tagged","type":"object"}`
	if string(js) != want {
		t.Fatalf("got  %s\nwant %s", js, want)
	}
}

func TestSchemaOfRecursiveEmbeddedAndBadTypes(t *testing.T) {
	js, err := SchemaOf[node]()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"items":{"$ref":"#/$defs/node"}`) || !strings.Contains(string(js), `"$defs":{"node":`) {
		t.Fatalf("recursive type: %s", js)
	}
	js, err = SchemaOf[withEmbedded]()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"required":["id","name"]`) {
		t.Fatalf("embedded struct's fields are promoted: %s", js)
	}
	for _, f := range []func() (json.RawMessage, error){
		SchemaOf[int], SchemaOf[[]City], SchemaOf[struct{ C chan int }], SchemaOf[map[int]string],
	} {
		if _, err := f(); !errors.Is(err, ErrConfig) {
			t.Fatalf("want a config error, got %v", err)
		}
	}
}
