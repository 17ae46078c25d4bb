package panto

import (
	"context"
	"encoding/json"
	"time"
)

// Config mirrors panto's JSON configuration (DESIGN.md, "Configuration"). Zero values
// mean the library's defaults. NewAgent builds the JSON from it and the core validates
// it: a bad value is an *Error of kind config whose message names the key.
type Config struct {
	Provider    string   // "openai" (default) or "anthropic"
	Model       string   // required
	BaseURL     string   // as in the provider's official SDK (OpenAI's includes /v1)
	APIKey      string   // default: $OPENAI_API_KEY / $ANTHROPIC_API_KEY
	System      string   // system prompt
	MaxTokens   int      // per response
	Temperature *float64 // nil: the provider's default
	MaxSteps    int      // assistant messages per turn
	// ToolConcurrency is how many tool calls of one message run at once.
	ToolConcurrency int
	// ToolTimeout bounds the wait for one tool's result (rounded down to milliseconds).
	ToolTimeout time.Duration
	// Tools are host tools: implemented in Go (Func) or answered by hand.
	Tools         []Tool
	Retry         Retry
	Timeouts      Timeouts
	QueueCapacity int               // events buffered between the turn and the consumer
	Headers       map[string]string // extra HTTP headers sent with every request
	// Caps on one SSE event, one assistant message and one tool result, in bytes.
	MaxEventBytes      int
	MaxMessageBytes    int
	MaxToolOutputBytes int
	// Reasoning control for every turn (TurnOptions.Reasoning replaces it for one turn);
	// nil leaves the provider's default.
	Reasoning *Reasoning
	// PromptCaching turns Anthropic's cache breakpoints off with Bool(false); nil means
	// the default (on).
	PromptCaching *bool
	// Compaction enables automatic compaction; nil never compacts on its own.
	Compaction *Compaction
	// Compat names the OpenAI-compatible server for its own request fields: "auto"
	// (default, decided from BaseURL), "openai", "deepseek", "ollama", "vllm", "generic".
	Compat string
}

// Reasoning controls how hard the model thinks. Effort is "none", "low", "medium" or
// "high"; BudgetTokens (0: by effort) is the thinking budget where the provider takes one
// (Anthropic).
type Reasoning struct {
	Effort       string `json:"effort"`
	BudgetTokens int    `json:"budget_tokens,omitempty"`
}

// Compaction configures automatic compaction: when the last request's input tokens pass
// ThresholdTokens, the next request of a turn first summarizes the older history,
// keeping the last KeepLast messages (0: 6). Model and Prompt (empty: the agent's model,
// the documented default prompt) write the summary.
type Compaction struct {
	ThresholdTokens int    `json:"threshold_tokens"`
	KeepLast        int    `json:"keep_last,omitempty"`
	Model           string `json:"model,omitempty"`
	Prompt          string `json:"prompt,omitempty"`
}

// Bool returns a pointer to b, for Config.PromptCaching.
func Bool(b bool) *bool { return &b }

// Retry configures how failed requests are retried.
type Retry struct {
	// MaxRetries is the number of retries after the first attempt; 0 means the default
	// and a negative value means none.
	MaxRetries   int
	InitialDelay time.Duration // first backoff, doubled per retry
	MaxDelay     time.Duration // cap on one backoff
	MaxElapsed   time.Duration // overall deadline of one message's retries
}

// Timeouts bounds the waits for the provider.
type Timeouts struct {
	Connect time.Duration // TCP + TLS connect
	Idle    time.Duration // any wait for the provider (headers or the next bytes)
	Request time.Duration // one whole attempt
}

// Tool is a host tool: declared to the model with Name, Description and Parameters (a
// JSON Schema object; nil means one without properties) and, when Func is set, run by
// the stream automatically in its own goroutine with the stream's context. Func's
// result becomes the tool result; a returned error or a panic becomes an error result
// that the model reads. A Tool without Func is answered with Stream.SubmitToolResult.
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage
	Func        func(ctx context.Context, args json.RawMessage) (string, error)
}

// Float returns a pointer to x, for Config.Temperature.
func Float(x float64) *float64 { return &x }

func ms(d time.Duration) int64 { return d.Milliseconds() }

// configJSON builds the JSON object the core validates; zero values are left out.
func (c *Config) configJSON() ([]byte, error) {
	m := map[string]any{}
	put := func(k string, v any, set bool) {
		if set {
			m[k] = v
		}
	}
	put("provider", c.Provider, c.Provider != "")
	put("model", c.Model, c.Model != "")
	put("base_url", c.BaseURL, c.BaseURL != "")
	put("api_key", c.APIKey, c.APIKey != "")
	put("system", c.System, c.System != "")
	put("max_tokens", c.MaxTokens, c.MaxTokens != 0)
	put("temperature", c.Temperature, c.Temperature != nil)
	put("max_steps", c.MaxSteps, c.MaxSteps != 0)
	put("tool_concurrency", c.ToolConcurrency, c.ToolConcurrency != 0)
	put("tool_timeout_ms", ms(c.ToolTimeout), c.ToolTimeout != 0)
	put("queue_capacity", c.QueueCapacity, c.QueueCapacity != 0)
	put("headers", c.Headers, len(c.Headers) != 0)
	put("max_event_bytes", c.MaxEventBytes, c.MaxEventBytes != 0)
	put("max_message_bytes", c.MaxMessageBytes, c.MaxMessageBytes != 0)
	put("max_tool_output_bytes", c.MaxToolOutputBytes, c.MaxToolOutputBytes != 0)
	put("reasoning", c.Reasoning, c.Reasoning != nil)
	put("prompt_caching", c.PromptCaching, c.PromptCaching != nil)
	put("compaction", c.Compaction, c.Compaction != nil)
	put("compat", c.Compat, c.Compat != "")
	if len(c.Tools) != 0 {
		tools := make([]map[string]any, len(c.Tools))
		for i, t := range c.Tools {
			spec := map[string]any{"name": t.Name, "description": t.Description}
			if len(t.Parameters) != 0 {
				spec["parameters"] = t.Parameters
			}
			tools[i] = spec
		}
		m["tools"] = tools
	}
	retry := map[string]any{}
	if c.Retry.MaxRetries > 0 {
		retry["max_retries"] = c.Retry.MaxRetries
	} else if c.Retry.MaxRetries < 0 {
		retry["max_retries"] = 0
	}
	if c.Retry.InitialDelay != 0 {
		retry["initial_delay_ms"] = ms(c.Retry.InitialDelay)
	}
	if c.Retry.MaxDelay != 0 {
		retry["max_delay_ms"] = ms(c.Retry.MaxDelay)
	}
	if c.Retry.MaxElapsed != 0 {
		retry["max_elapsed_ms"] = ms(c.Retry.MaxElapsed)
	}
	if len(retry) != 0 {
		m["retry"] = retry
	}
	timeouts := map[string]any{}
	if c.Timeouts.Connect != 0 {
		timeouts["connect_ms"] = ms(c.Timeouts.Connect)
	}
	if c.Timeouts.Idle != 0 {
		timeouts["idle_ms"] = ms(c.Timeouts.Idle)
	}
	if c.Timeouts.Request != 0 {
		timeouts["request_ms"] = ms(c.Timeouts.Request)
	}
	if len(timeouts) != 0 {
		m["timeouts"] = timeouts
	}
	return json.Marshal(m)
}
