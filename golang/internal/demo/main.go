// Command demo is the demo turn from Go: the weather tool answered by a Go function,
// the answer streamed to the terminal. scripts/demo.sh --all runs it against
// panto-testserver.
//
//	demo BASE_URL   (an OpenAI-compatible endpoint with its /v1; key from $OPENAI_API_KEY)
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/panto/panto/panto"
)

func main() {
	baseURL := "https://api.openai.com/v1"
	if len(os.Args) > 1 {
		baseURL = os.Args[1]
	}
	weather := panto.Tool{
		Name:        "weather",
		Description: "Current weather of a city",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`),
		Func: func(ctx context.Context, args json.RawMessage) (string, error) {
			var a struct{ City string }
			if err := json.Unmarshal(args, &a); err != nil {
				return "", err
			}
			return fmt.Sprintf(`{"city":%q,"temp_c":18,"sky":"sunny"}`, a.City), nil
		},
	}
	agent, err := panto.NewAgent(panto.Config{Model: "gpt-4o-mini", BaseURL: baseURL, Tools: []panto.Tool{weather}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer agent.Close()
	s, err := agent.Stream(context.Background(), "What's the weather in Paris?")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer s.Close()
	for ev := range s.Iter() {
		switch e := ev.(type) {
		case *panto.ContentDelta:
			if e.Kind == "text" {
				fmt.Print(e.Text)
			}
		case *panto.ToolCallStart:
			fmt.Printf("→ %s(%s)\n", e.Name, e.Arguments)
		case *panto.ToolResult:
			fmt.Printf("← %s\n", e.Output)
		}
	}
	fmt.Println()
	if err := s.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
