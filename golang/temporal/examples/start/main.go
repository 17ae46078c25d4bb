// Command start starts a panto turn on Temporal, prints its text as it streams (the
// workflow's "text" query) and the final answer on its last line
// (docs/durable-execution.md).
//
//	go run ./examples/start --address 127.0.0.1:7233 --task-queue turns "question"
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strings"
	"time"

	pantotemporal "github.com/panto/panto/panto/temporal"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
)

func main() {
	address := flag.String("address", "127.0.0.1:7233", "the Temporal server")
	queue := flag.String("task-queue", "turns", "the task queue")
	flag.String("base-url", "", "the worker's provider URL (accepted for symmetry)")
	flag.Parse()
	question := "What is the weather in Paris?"
	if flag.NArg() > 0 {
		question = flag.Arg(0)
	}
	ctx := context.Background()
	c, err := client.Dial(client.Options{HostPort: *address, Logger: tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, nil)))})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: fmt.Sprintf("turn-%d", time.Now().UnixNano()), TaskQueue: *queue,
	}, pantotemporal.TurnWorkflowName, pantotemporal.TurnRequest{Agent: "weather", Input: question})
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan struct{})
	var result pantotemporal.TurnResult
	var runErr error
	go func() { runErr = run.Get(ctx, &result); close(done) }()
	// The live view: the text streamed so far. Not durable (a step that runs again
	// streams again); the result is.
	shown := ""
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-time.After(100 * time.Millisecond):
		}
		if v, err := c.QueryWorkflow(ctx, run.GetID(), run.GetRunID(), "text"); err == nil {
			var text string
			if v.Get(&text) == nil && strings.HasPrefix(text, shown) && len(text) > len(shown) {
				fmt.Print(text[len(shown):])
				shown = text
			}
		}
	}
	if runErr != nil {
		log.Fatal(runErr)
	}
	fmt.Println()
	fmt.Println(result.Text)
}
