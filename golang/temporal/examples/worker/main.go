// Command worker is a Temporal worker that runs panto turns (docs/durable-execution.md):
// TurnWorkflow and the activities of one agent, "weather", with one Go tool. Kill it at
// any time: a worker started again (here or on another machine) finishes its turns.
//
//	go run ./examples/worker --address 127.0.0.1:7233 --task-queue turns --base-url URL
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"

	"github.com/panto/panto/panto"
	pantotemporal "github.com/panto/panto/panto/temporal"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
)

func main() {
	address := flag.String("address", "127.0.0.1:7233", "the Temporal server")
	queue := flag.String("task-queue", "turns", "the task queue")
	baseURL := flag.String("base-url", "", "the provider's base URL")
	flag.Parse()
	weather := panto.Tool{
		Name:        "weather",
		Description: "Current weather in a city.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`),
		Func: func(ctx context.Context, args json.RawMessage) (string, error) {
			var in struct{ City string }
			if err := json.Unmarshal(args, &in); err != nil {
				return "", err
			}
			return fmt.Sprintf("18°C and sunny in %s", in.City), nil
		},
	}
	agents := map[string]pantotemporal.AgentFactory{
		"weather": func() (panto.Config, error) {
			model := os.Getenv("PANTO_MODEL")
			if model == "" {
				model = "gpt-4o-mini"
			}
			// panto's own retries are off: Temporal retries the activities.
			return panto.Config{Provider: "openai", Model: model, BaseURL: *baseURL, APIKey: os.Getenv("OPENAI_API_KEY"),
				Retry: panto.Retry{MaxRetries: panto.Int(0)}, Tools: []panto.Tool{weather}}, nil
		},
	}
	c, err := client.Dial(client.Options{HostPort: *address, Logger: tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, nil)))})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	w := worker.New(c, *queue, worker.Options{})
	pantotemporal.RegisterTurn(w, agents)
	if err := w.Start(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("worker ready")
	<-worker.InterruptCh()
	w.Stop()
}
