package panto_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/panto/panto/panto"
)

// The examples read OPENAI_BASE_URL and OPENAI_API_KEY, as OpenAI's SDKs do: unset,
// BaseURL is empty (OpenAI's API), and the key comes from OPENAI_API_KEY by default. Their
// output is that of the stand-in provider `go test` runs them against.

func Example() {
	agent, err := panto.NewAgent(panto.Config{
		Provider: "openai",
		Model:    "gpt-4o",
		BaseURL:  os.Getenv("OPENAI_BASE_URL"), // "": OpenAI's API; the key: OPENAI_API_KEY
		Tools: []panto.Tool{{
			Name:        "weather",
			Description: "The current weather in a city",
			Parameters:  json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`),
			Func: func(ctx context.Context, args json.RawMessage) (string, error) {
				var a struct{ City string }
				if err := json.Unmarshal(args, &a); err != nil {
					return "", err
				}
				return "18°C and sunny in " + a.City, nil
			},
		}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer agent.Close()

	s, err := agent.Stream(context.Background(), "What is the weather in Paris?")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	for ev := range s.Iter() {
		switch e := ev.(type) {
		case *panto.ToolCallStart:
			fmt.Printf("calling %s %s\n", e.Name, e.Arguments)
		case *panto.ToolResult:
			fmt.Printf("result: %s\n", e.Output)
		case *panto.MessageComplete:
			fmt.Printf("answer: %s\n", e.Text)
		}
	}
	if err := s.Err(); err != nil {
		fmt.Println(err)
	}
	// Output:
	// calling weather {"city":"Paris"}
	// result: 18°C and sunny in Paris
	// answer: It is 18°C in Paris.
}

func ExampleStream_Next() {
	agent, err := panto.NewAgent(panto.Config{Model: "gpt-4o", BaseURL: os.Getenv("OPENAI_BASE_URL")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer agent.Close()
	s, err := agent.Stream(context.Background(), "Say hello")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	for {
		ev, err := s.Next()
		if err == panto.ErrDone {
			break
		}
		if errors.Is(err, panto.ErrRateLimited) {
			fmt.Println("slow down")
			return
		} else if err != nil {
			fmt.Println(err)
			return
		}
		if d, ok := ev.(*panto.ContentDelta); ok {
			fmt.Print(d.Text)
		}
	}
	fmt.Println()
	// Output: Hello, world.
}

func ExampleError() {
	_, err := panto.NewAgent(panto.Config{Model: "gpt-4o", Provider: "openia"})
	var perr *panto.Error
	if errors.As(err, &perr) {
		fmt.Println(perr.Kind, errors.Is(err, panto.ErrConfig))
	}
	// Output: config true
}

func ExampleEvent_json() {
	b, _ := json.Marshal(&panto.ContentDelta{Message: 0, Block: 1, Kind: "text", Text: "Hi"})
	fmt.Println(string(b))
	// Output: {"type":"content_delta","message":0,"block":1,"kind":"text","text":"Hi"}
}

func ExampleAgent_Stream() {
	agent, err := panto.NewAgent(panto.Config{Model: "gpt-4o", BaseURL: os.Getenv("OPENAI_BASE_URL")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer agent.Close()
	// The context bounds the whole turn: cancelling it (or its deadline) ends the stream
	// with an error matching ErrCancelled.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := agent.Stream(ctx, "Count to three")
	if err != nil {
		fmt.Println(err) // ErrBusy while another stream of this agent is running
		return
	}
	defer s.Close()
	for ev := range s.Iter() {
		if m, ok := ev.(*panto.MessageComplete); ok {
			fmt.Println(m.Text)
		}
	}
	if err := s.Err(); err != nil {
		fmt.Println(err)
	}
	// Output: One, two, three.
}

func ExampleStream_Iter() {
	agent, err := panto.NewAgent(panto.Config{Model: "gpt-4o", BaseURL: os.Getenv("OPENAI_BASE_URL")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer agent.Close()
	s, err := agent.Stream(context.Background(), "Count to three")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	// Iter ends after MessageComplete or at the first failure; Err tells which.
	for ev := range s.Iter() {
		if d, ok := ev.(*panto.ContentDelta); ok && d.Kind == "text" {
			fmt.Printf("[%s]", d.Text)
		}
	}
	fmt.Println()
	if err := s.Err(); err != nil {
		fmt.Println("failed:", err)
	}
	// Output: [One,][ two,][ three.]
}

func ExampleTool() {
	add := panto.Tool{
		Name:        "add",
		Description: "Adds two numbers",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}`),
		// Runs on its own goroutine, concurrently with the turn's other calls; ctx ends
		// at the tool timeout or when the turn is cancelled.
		Func: func(ctx context.Context, args json.RawMessage) (string, error) {
			var in struct{ A, B float64 }
			if err := json.Unmarshal(args, &in); err != nil {
				return "", err // the model reads the error and may call again
			}
			return fmt.Sprint(in.A + in.B), nil
		},
	}
	agent, err := panto.NewAgent(panto.Config{
		Model:   "gpt-4o",
		BaseURL: os.Getenv("OPENAI_BASE_URL"),
		Tools:   []panto.Tool{add},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer agent.Close()
	s, err := agent.Stream(context.Background(), "What is 19 + 23?")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	for ev := range s.Iter() {
		switch e := ev.(type) {
		case *panto.ToolResult:
			fmt.Printf("%s -> %s (error: %v)\n", e.Name, e.Output, e.IsError)
		case *panto.MessageComplete:
			fmt.Println(e.Text)
		}
	}
	if err := s.Err(); err != nil {
		fmt.Println(err)
	}
	// Output:
	// add -> 42 (error: false)
	// 19 + 23 = 42.
}

func ExampleTool_error() {
	divide := panto.Tool{
		Name:        "divide",
		Description: "Divides a by b",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}`),
		Func: func(ctx context.Context, args json.RawMessage) (string, error) {
			var in struct{ A, B float64 }
			if err := json.Unmarshal(args, &in); err != nil {
				return "", err
			}
			if in.B == 0 {
				// An error is the call's result, marked as an error: the model reads it;
				// the turn goes on.
				return "", errors.New("division by zero")
			}
			return fmt.Sprint(in.A / in.B), nil
		},
	}
	agent, err := panto.NewAgent(panto.Config{Model: "gpt-4o", BaseURL: os.Getenv("OPENAI_BASE_URL"), Tools: []panto.Tool{divide}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer agent.Close()
	s, err := agent.Stream(context.Background(), "Divide 1 by 0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	for ev := range s.Iter() {
		switch e := ev.(type) {
		case *panto.ToolResult:
			fmt.Printf("%s -> %s (error: %v)\n", e.Name, e.Output, e.IsError)
		case *panto.MessageComplete:
			fmt.Println(e.Text)
		}
	}
	// Output:
	// divide -> division by zero (error: true)
	// 1 cannot be divided by 0.
}

func ExampleError_retryAfter() {
	agent, err := panto.NewAgent(panto.Config{Model: "gpt-4o", BaseURL: os.Getenv("OPENAI_BASE_URL")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer agent.Close()
	s, err := agent.Stream(context.Background(), "Are you there?")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	for range s.Iter() {
	}
	err = s.Err()
	// Every failure is a *panto.Error; errors.Is matches its kind's ErrX.
	var perr *panto.Error
	if errors.Is(err, panto.ErrRateLimited) && errors.As(err, &perr) {
		// The server asked for a wait past Retry.MaxRetryAfter (60 s by default), so the
		// turn failed at once instead of waiting: the caller decides.
		fmt.Println(perr.Kind, perr.Status, perr.RetryAfter, perr.Retryable)
	}
	// Output: rate_limited 429 2m0s true
}

func ExampleRunAs() {
	agent, err := panto.NewAgent(panto.Config{Model: "gpt-4o", BaseURL: os.Getenv("OPENAI_BASE_URL")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer agent.Close()

	// The answer's shape: its JSON Schema is reflected from the struct (json tags;
	// omitempty or a pointer makes a field optional), sent to the provider, and the
	// model's answer validated against it before it is decoded.
	type City struct {
		Name       string   `json:"name"`
		Country    string   `json:"country"`
		Population int      `json:"population,omitempty" description:"inhabitants of the city proper"`
		Landmarks  []string `json:"landmarks"`
	}
	city, err := panto.RunAs[City](context.Background(), agent, "Name the largest city of Japan")
	var perr *panto.Error
	if errors.As(err, &perr) && (perr.Kind == panto.KindOutputInvalid || perr.Kind == panto.KindOutputRefused) {
		fmt.Printf("no valid answer: %s (the model wrote %q)\n", perr.Message, perr.Output)
		return
	} else if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s, %s: %d inhabitants; %v\n", city.Name, city.Country, city.Population, city.Landmarks)
	// Output: Tokyo, Japan: 14000000 inhabitants; [Tokyo Tower Senso-ji]
}

func ExampleAgent_Resume() {
	deleteFile := panto.Tool{
		Name:          "delete_file",
		Description:   "Deletes a file",
		Parameters:    json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`),
		NeedsApproval: panto.Bool(true), // a call pauses the turn until it is approved
		Func: func(ctx context.Context, args json.RawMessage) (string, error) {
			var in struct{ Path string }
			if err := json.Unmarshal(args, &in); err != nil {
				return "", err
			}
			return "deleted " + in.Path, nil // os.Remove(in.Path) in earnest
		},
	}
	config := panto.Config{Model: "gpt-4o", BaseURL: os.Getenv("OPENAI_BASE_URL"), Tools: []panto.Tool{deleteFile}}
	agent, err := panto.NewAgent(config)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer agent.Close()
	s, err := agent.Stream(context.Background(), "Clean up old.log")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	var paused []panto.DeferredCall
	for ev := range s.Iter() {
		if m, ok := ev.(*panto.MessageComplete); ok && m.StopReason == panto.StopDeferred {
			paused, _ = m.DeferredCalls()
		}
	}
	saved, err := s.Checkpoint() // JSON: store it anywhere (a file, a database row)
	if err != nil || len(paused) == 0 {
		fmt.Println("not paused:", err, s.Err())
		return
	}
	call := paused[0]
	fmt.Printf("approve %s %s? (%s)\n", call.Name, call.Arguments, call.Reason)

	// Later, in any process, with an agent that has the same tools:
	later, err := panto.NewAgent(config)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer later.Close()
	r, err := later.Resume(context.Background(), saved, panto.Answers{}.Approve(call.CallID))
	if err != nil {
		fmt.Println(err) // a checkpoint that is not one, or answers that do not fit it
		return
	}
	defer r.Close()
	for ev := range r.Iter() {
		switch e := ev.(type) {
		case *panto.ToolResult:
			fmt.Println("result:", e.Output)
		case *panto.MessageComplete:
			fmt.Println(e.Text)
		}
	}
	if err := r.Err(); err != nil {
		fmt.Println(err)
	}
	// Output:
	// approve delete_file {"path":"old.log"}? (approval)
	// result: deleted old.log
	// I deleted old.log.
}
