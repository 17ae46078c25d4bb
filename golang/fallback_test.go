package panto

import (
	"context"
	"errors"
	"testing"
)

// A fallback entry for srv, answering for model.
func fallbackTo(srv *testServer, model string) Fallback {
	return Fallback{Provider: "openai", Model: model, BaseURL: srv.url + "/v1", APIKey: "sk-fallback-secret-key"}
}

// byModel is an exchange answering a Chat Completions request for model.
func byModel(model string, response obj) obj {
	return obj{"match": obj{"method": "POST", "path": "/v1/chat/completions", "body": obj{"/model": model}},
		"response": response}
}

func httpError(status int, errorType string) obj {
	return obj{"status": status, "json": obj{"error": obj{"type": errorType, "message": "scripted"}}}
}

// A 503 of the agent's own model goes to the next model of Fallback within the turn,
// with a ProviderFallback event; MessageComplete names the model that answered.
func TestFallbackAfterA503(t *testing.T) {
	srv := startServer(t, scenario(
		byModel("gpt-test", httpError(503, "server_error")),
		byModel("gpt-fallback", sseResponse(textSSE("from ", "the fallback"))),
	))
	cfg := testConfig(srv)
	cfg.Fallback = []Fallback{fallbackTo(srv, "gpt-fallback")}
	a := newTestAgent(t, cfg)
	s, err := a.Stream(context.Background(), "hi")
	if err != nil {
		t.Fatal(err)
	}
	evs := drain(t, s)
	var fell []*ProviderFallback
	for _, ev := range evs {
		if f, ok := ev.(*ProviderFallback); ok {
			fell = append(fell, f)
		}
	}
	want := ProviderFallback{Message: 0, FromProvider: "openai", FromModel: "gpt-test",
		ToProvider: "openai", ToModel: "gpt-fallback", ErrorKind: "server", Status: 503}
	if len(fell) != 1 {
		t.Fatalf("want one ProviderFallback: %s", types(evs))
	}
	got := *fell[0]
	got.ErrorMessage = ""
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	mc := complete(t, evs)
	if mc.Model != "gpt-fallback" || mc.Text != "from the fallback" {
		t.Fatalf("%+v", mc)
	}
}

// An authentication error would be the same elsewhere: no fallback, the turn fails.
func TestNoFallbackAfterAnAuthenticationError(t *testing.T) {
	srv := startServer(t, scenario(
		byModel("gpt-test", httpError(401, "invalid_api_key")),
		byModel("gpt-fallback", sseResponse(textSSE("never"))),
	))
	cfg := testConfig(srv)
	cfg.Fallback = []Fallback{fallbackTo(srv, "gpt-fallback")}
	a := newTestAgent(t, cfg)
	s, err := a.Stream(context.Background(), "hi")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var evs []Event
	for ev := range s.Iter() {
		evs = append(evs, ev)
	}
	if err := s.Err(); !errors.Is(err, ErrAuthentication) {
		t.Fatalf("want ErrAuthentication, got %v", err)
	}
	for _, ev := range evs {
		if _, ok := ev.(*ProviderFallback); ok {
			t.Fatalf("fell back: %s", types(evs))
		}
	}
}

// A configuration error names the entry.
func TestFallbackConfigErrorNamesTheEntry(t *testing.T) {
	cfg := Config{Provider: "openai", Model: "m", APIKey: "k",
		Fallback: []Fallback{{Provider: "openai"}}}
	_, err := NewAgent(cfg)
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("want ErrConfig, got %v", err)
	}
}
