package panto_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

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
