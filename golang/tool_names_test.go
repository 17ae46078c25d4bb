package panto

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// A tool is checked when the agent is made, against what the providers accept (a name of
// 1 to 64 ASCII letters, digits, '_' or '-'; parameters with "type": "object"), so a bad
// one is a config error naming it, not a provider's 400 at the first request.
func TestABadToolFailsNewAgentNamingIt(t *testing.T) {
	base := Config{Provider: "openai", Model: "m", BaseURL: "http://127.0.0.1:9/v1", APIKey: "k"}
	for _, name := range []string{"get weather", "get.weather", "wetter_äöü", "a/b", strings.Repeat("x", 65)} {
		cfg := base
		cfg.Tools = []Tool{{Name: "ok"}, {Name: name}}
		a, err := NewAgent(cfg)
		if err == nil {
			_ = a.Close()
			t.Fatalf("%q: no error", name)
		}
		var perr *Error
		if !errors.Is(err, ErrConfig) || !errors.As(err, &perr) ||
			!strings.HasPrefix(perr.Message, "Config.Tools[1].Name (tools[1].name): tool ") ||
			!strings.Contains(perr.Message, "not a valid tool name") {
			t.Fatalf("%q: %v", name, err)
		}
	}
	cfg := base
	cfg.Tools = []Tool{{Name: "lookup", Parameters: json.RawMessage(`{"type":"array"}`)}}
	if _, err := NewAgent(cfg); !errors.Is(err, ErrConfig) ||
		!strings.HasPrefix(err.(*Error).Message,
			`Config.Tools[0].Parameters (tools[0].parameters): tool "lookup": must be a JSON Schema object with "type": "object"`) {
		t.Fatalf("parameters: %v", err)
	}
	cfg.Tools = []Tool{{Name: "get_weather-2"}, {Name: strings.Repeat("x", 64)}}
	a, err := NewAgent(cfg)
	if err != nil {
		t.Fatalf("good names: %v", err)
	}
	_ = a.Close()
}
