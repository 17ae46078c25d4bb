package panto

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// requests returns the bodies the server received, decoded.
func (s *testServer) requests(tb testing.TB) []map[string]any {
	tb.Helper()
	resp, err := controlClient.Get(s.url + "/_panto/requests")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var reqs []struct {
		Body json.RawMessage `json:"body"` // the JSON body as an object (else a string)
	}
	if err := json.NewDecoder(resp.Body).Decode(&reqs); err != nil {
		tb.Fatal(err)
	}
	out := make([]map[string]any, len(reqs))
	for i, r := range reqs {
		if err := json.Unmarshal(r.Body, &out[i]); err != nil {
			tb.Fatalf("request %d: %v: %s", i, err, r.Body)
		}
	}
	return out
}

// answerSSE is a text answer (split in two deltas) carrying text.
func answerSSE(text string) obj {
	return sseResponse(textSSE(text[:len(text)/2], text[len(text)/2:]))
}

const tokyo = `{"name":"Tokyo","population":14000000,"landmarks":[{"name":"Tokyo Tower","year":1958},{"name":"Senso-ji","year":null}],"founded":"1457-01-01T00:00:00Z","nickname":null}`

func TestRunAsSendsTheSchemaAndDecodesTheAnswer(t *testing.T) {
	// The server answers only a request whose response_format carries the struct's schema.
	srv := startServer(t, scenario(exchange(answerSSE(tokyo), `"response_format"`, `"name":"City"`, `"landmarks"`)))
	a := newTestAgent(t, testConfig(srv))
	city, err := RunAs[City](context.Background(), a, "Largest city of Japan?")
	if err != nil {
		t.Fatal(err)
	}
	year := 1958
	want := City{
		Name: "Tokyo", Population: 14000000,
		Landmarks: []landmark{{"Tokyo Tower", &year}, {"Senso-ji", nil}},
		Founded:   time.Date(1457, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	if !reflect.DeepEqual(city, want) {
		t.Fatalf("got %+v\nwant %+v", city, want)
	}
	rf := srv.requests(t)[0]["response_format"].(map[string]any)
	js := rf["json_schema"].(map[string]any)
	if rf["type"] != "json_schema" || js["strict"] != true {
		t.Fatalf("response_format: %v", rf)
	}
	schema := js["schema"].(map[string]any)
	if schema["additionalProperties"] != false || len(schema["required"].([]any)) != len(schema["properties"].(map[string]any)) {
		t.Fatalf("not normalized for strict mode: %v", schema)
	}
}

func TestRunAsWithAGivenSchemaAndMessageCompleteOutput(t *testing.T) {
	schema := json.RawMessage(`{"title":"answer","type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}`)
	srv := startServer(t, scenario(exchange(answerSSE(`{"ok":true}`), `"name":"answer"`)))
	a := newTestAgent(t, testConfig(srv))
	got, err := RunAs[map[string]bool](context.Background(), a, "ok?", WithSchema(schema))
	if err != nil || !got["ok"] {
		t.Fatalf("got %v, %v", got, err)
	}

	// The same turn through Stream: MessageComplete.Output is the validated JSON.
	srv2 := startServer(t, scenario(exchange(answerSSE(`{"ok":false}`), `"name":"answer"`)))
	a2 := newTestAgent(t, testConfig(srv2))
	s, err := a2.StreamWith(context.Background(), "ok?", TurnOptions{OutputSchema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var last Event
	for ev := range s.Iter() {
		last = ev
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	mc, ok := last.(*MessageComplete)
	if !ok || string(mc.Output) != `{"ok":false}` {
		t.Fatalf("last event %#v", last)
	}
}

func TestRunAsKeepsNumbersExactlyAsWritten(t *testing.T) {
	// Into an interface, a number is the json.Number the model wrote: not a float64,
	// which would print 1.2345678901234568e+29 and 0.12345678901234568.
	const answer = `{"a":123456789012345678901234567890,"b":0.12345678901234567890123}`
	schema := json.RawMessage(`{"title":"numbers","type":"object","properties":{"a":{"type":"integer"},"b":{"type":"number"}},"required":["a","b"]}`)
	srv := startServer(t, scenario(exchange(answerSSE(answer), `"name":"numbers"`)))
	a := newTestAgent(t, testConfig(srv))
	got, err := RunAs[map[string]any](context.Background(), a, "Numbers?", WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := got["a"].(json.Number); !ok || n.String() != "123456789012345678901234567890" {
		t.Fatalf("a = %#v", got["a"])
	}
	if n, ok := got["b"].(json.Number); !ok || n.String() != "0.12345678901234567890123" {
		t.Fatalf("b = %#v", got["b"])
	}
}

func TestRunAsRepairsAnInvalidAnswer(t *testing.T) {
	srv := startServer(t, scenario(
		exchange(answerSSE(`{"name":"Tokyo"}`)),
		// The repair request carries the validation error back to the model.
		exchange(answerSSE(tokyo), "did not match the required JSON schema"),
	))
	cfg := testConfig(srv)
	schema, err := SchemaOf[City]()
	if err != nil {
		t.Fatal(err)
	}
	a := newTestAgent(t, cfg)
	s, err := a.StreamWith(context.Background(), "Largest city of Japan?", TurnOptions{OutputSchema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var repairs []*OutputRepair
	var done *MessageComplete
	for ev := range s.Iter() {
		switch e := ev.(type) {
		case *OutputRepair:
			repairs = append(repairs, e)
		case *MessageComplete:
			done = e
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if len(repairs) != 1 || repairs[0].Attempt != 1 || repairs[0].MaxAttempts != 1 || !strings.Contains(repairs[0].Error, "population") {
		t.Fatalf("repairs: %+v", repairs)
	}
	var city City
	if err := json.Unmarshal(done.Output, &city); err != nil || city.Name != "Tokyo" {
		t.Fatalf("output %s: %v", done.Output, err)
	}
}

func TestRunAsFailuresCarryTheRawOutput(t *testing.T) {
	refusal := []any{
		chunk(obj{"role": "assistant", "content": nil, "refusal": ""}, nil),
		chunk(obj{"refusal": "I can't help "}, nil), chunk(obj{"refusal": "with that."}, nil),
		chunk(obj{}, "stop"), usageChunk(1, 1), doneItem,
	}
	truncated := []any{
		chunk(obj{"role": "assistant", "content": ""}, nil), chunk(obj{"content": `{"name":"Tok`}, nil),
		chunk(obj{}, "length"), usageChunk(1, 1), doneItem,
	}
	invalid := exchange(answerSSE(`{"name":"Tokyo"}`))
	invalid["times"] = 2
	cases := []struct {
		name     string
		scenario obj
		kind     *Error
		output   string
		requests int
	}{
		{"invalid after a repair", scenario(invalid), ErrOutputInvalid, `{"name":"Tokyo"}`, 2},
		{"not JSON", scenario(exchange(answerSSE("Tokyo, of course."), "json_schema"), exchange(answerSSE("Tokyo!"))), ErrOutputInvalid, "Tokyo!", 2},
		{"refused", scenario(exchange(sseResponse(refusal))), ErrOutputRefused, "I can't help with that.", 1},
		{"truncated", scenario(exchange(sseResponse(truncated))), ErrOutputTruncated, `{"name":"Tok`, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := startServer(t, c.scenario)
			a := newTestAgent(t, testConfig(srv))
			_, err := RunAs[City](context.Background(), a, "Largest city of Japan?")
			var perr *Error
			if !errors.Is(err, c.kind) || !errors.As(err, &perr) {
				t.Fatalf("want %v, got %v", c.kind, err)
			}
			if perr.Output != c.output || perr.Retryable {
				t.Fatalf("output %q (want %q), retryable %v", perr.Output, c.output, perr.Retryable)
			}
			if !strings.Contains(mustJSON(t, perr), `"output":`) {
				t.Fatalf("the error JSON has no output: %s", mustJSON(t, perr))
			}
			if n := len(srv.requests(t)); n != c.requests {
				t.Fatalf("%d requests, want %d", n, c.requests)
			}
		})
	}
}

func TestRunAsAnswerThatDoesNotDecodeIsOutputInvalid(t *testing.T) {
	// The schema given accepts a string where T has an int: the core's validation
	// passes, encoding/json refuses, and the raw text is on the error.
	schema := json.RawMessage(`{"type":"object","properties":{"population":{"type":"string"}},"required":["population"]}`)
	srv := startServer(t, scenario(exchange(answerSSE(`{"population":"many"}`))))
	a := newTestAgent(t, testConfig(srv))
	_, err := RunAs[City](context.Background(), a, "?", WithSchema(schema))
	var perr *Error
	if !errors.As(err, &perr) || perr.Kind != KindOutputInvalid || perr.Output != `{"population":"many"}` {
		t.Fatalf("got %v", err)
	}
}
