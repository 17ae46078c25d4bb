// Command conformance is the conformance runner for Go: it runs one turn described on
// the command line and prints its trace, json.Marshal of each Event the stream returns,
// then the error line, built from the *panto.Error's fields, if the turn failed.
// scripts/conformance.sh compares it with the scenario's golden trace; the arguments,
// shared by every language's runner, are described in tests/conformance/README.md.
//
//	conformance --config JSON --prompt TEXT [--cancel-after K] [--answer NAME DELAY_MS IS_ERROR OUTPUT]...
//
// Tools with an answer get a Func, so the binding runs them itself (in goroutines) and
// turns a returned error into an error result; a tool never answered has no Func.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	panto "github.com/panto/panto/golang"
)

type answer struct {
	delay   time.Duration
	never   bool
	isError bool
	output  string
}

// fileConfig is the configuration JSON as the scenarios write it; it is mapped onto
// panto.Config field by field, so a key the Go Config cannot express fails loudly.
type fileConfig struct {
	Provider        string `json:"provider"`
	Model           string `json:"model"`
	BaseURL         string `json:"base_url"`
	APIKey          string `json:"api_key"`
	System          string `json:"system"`
	MaxTokens       int    `json:"max_tokens"`
	MaxSteps        int    `json:"max_steps"`
	ToolConcurrency int    `json:"tool_concurrency"`
	ToolTimeoutMS   int64  `json:"tool_timeout_ms"`
	Tools           []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"tools"`
	Retry *struct {
		MaxRetries     *int  `json:"max_retries"`
		InitialDelayMS int64 `json:"initial_delay_ms"`
		MaxDelayMS     int64 `json:"max_delay_ms"`
		MaxElapsedMS   int64 `json:"max_elapsed_ms"`
	} `json:"retry"`
	Timeouts *struct {
		ConnectMS int64 `json:"connect_ms"`
		IdleMS    int64 `json:"idle_ms"`
		RequestMS int64 `json:"request_ms"`
	} `json:"timeouts"`
	Reasoning *struct {
		Effort       string `json:"effort"`
		BudgetTokens int    `json:"budget_tokens"`
	} `json:"reasoning"`
	PromptCaching *bool `json:"prompt_caching"`
	Compaction    *struct {
		ThresholdTokens int    `json:"threshold_tokens"`
		KeepLast        int    `json:"keep_last"`
		Model           string `json:"model"`
		Prompt          string `json:"prompt"`
	} `json:"compaction"`
	Compat string `json:"compat"`
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

func buildConfig(text string, answers map[string]answer) (panto.Config, error) {
	var f fileConfig
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return panto.Config{}, fmt.Errorf("--config: %w", err)
	}
	cfg := panto.Config{
		Provider: f.Provider, Model: f.Model, BaseURL: f.BaseURL, APIKey: f.APIKey,
		System: f.System, MaxTokens: f.MaxTokens, MaxSteps: f.MaxSteps,
		ToolConcurrency: f.ToolConcurrency, ToolTimeout: ms(f.ToolTimeoutMS),
	}
	if f.Retry != nil {
		if f.Retry.MaxRetries != nil {
			cfg.Retry.MaxRetries = *f.Retry.MaxRetries
			if cfg.Retry.MaxRetries == 0 {
				cfg.Retry.MaxRetries = -1 // Go's zero value means "the default"
			}
		}
		cfg.Retry.InitialDelay = ms(f.Retry.InitialDelayMS)
		cfg.Retry.MaxDelay = ms(f.Retry.MaxDelayMS)
		cfg.Retry.MaxElapsed = ms(f.Retry.MaxElapsedMS)
	}
	if f.Timeouts != nil {
		cfg.Timeouts = panto.Timeouts{Connect: ms(f.Timeouts.ConnectMS), Idle: ms(f.Timeouts.IdleMS), Request: ms(f.Timeouts.RequestMS)}
	}
	if f.Reasoning != nil {
		cfg.Reasoning = &panto.Reasoning{Effort: f.Reasoning.Effort, BudgetTokens: f.Reasoning.BudgetTokens}
	}
	cfg.PromptCaching = f.PromptCaching
	if f.Compaction != nil {
		cfg.Compaction = &panto.Compaction{ThresholdTokens: f.Compaction.ThresholdTokens,
			KeepLast: f.Compaction.KeepLast, Model: f.Compaction.Model, Prompt: f.Compaction.Prompt}
	}
	cfg.Compat = f.Compat
	for _, t := range f.Tools {
		tool := panto.Tool{Name: t.Name, Description: t.Description, Parameters: t.Parameters}
		if a, ok := answers[t.Name]; ok && !a.never {
			tool.Func = func(ctx context.Context, _ json.RawMessage) (string, error) {
				if a.delay > 0 {
					select {
					case <-time.After(a.delay):
					case <-ctx.Done():
						return "", ctx.Err()
					}
				}
				if a.isError {
					return "", errors.New(a.output)
				}
				return a.output, nil
			}
		}
		cfg.Tools = append(cfg.Tools, tool)
	}
	return cfg, nil
}

// errorLine is the canonical error line, from the *panto.Error's fields.
type errorLine struct {
	Type         string  `json:"type"`
	Kind         string  `json:"kind"`
	Message      string  `json:"message"`
	Status       int     `json:"status"`
	Retryable    bool    `json:"retryable"`
	ProviderCode *string `json:"provider_code"`
}

func printError(err error) {
	var perr *panto.Error
	if !errors.As(err, &perr) {
		fmt.Fprintln(os.Stderr, "conformance: not a *panto.Error:", err)
		os.Exit(1)
	}
	line := errorLine{Type: "error", Kind: string(perr.Kind), Message: perr.Message, Status: perr.Status, Retryable: perr.Retryable}
	if perr.ProviderCode != "" {
		line.ProviderCode = &perr.ProviderCode
	}
	printJSON(line)
}

func printJSON(v any) {
	out, err := json.Marshal(v)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance: marshal:", err)
		os.Exit(1)
	}
	os.Stdout.Write(append(out, '\n'))
}

func main() {
	var configText, prompt string
	cancelAfter := -1
	answers := map[string]answer{}
	args := os.Args[1:]
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "--config" && i+1 < len(args):
			configText, i = args[i+1], i+1
		case args[i] == "--prompt" && i+1 < len(args):
			prompt, i = args[i+1], i+1
		case args[i] == "--cancel-after" && i+1 < len(args):
			n, err := strconv.Atoi(args[i+1])
			if err != nil {
				fmt.Fprintln(os.Stderr, "conformance: bad --cancel-after")
				os.Exit(2)
			}
			cancelAfter, i = n, i+1
		case args[i] == "--answer" && i+4 < len(args):
			delay, err := strconv.Atoi(args[i+2])
			if err != nil {
				fmt.Fprintln(os.Stderr, "conformance: bad --answer DELAY_MS")
				os.Exit(2)
			}
			answers[args[i+1]] = answer{delay: ms(int64(delay)), never: delay < 0, isError: args[i+3] == "true", output: args[i+4]}
			i += 4
		default:
			fmt.Fprintln(os.Stderr, "conformance: bad argument", args[i])
			os.Exit(2)
		}
	}
	cfg, err := buildConfig(configText, answers)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(2)
	}
	agent, err := panto.NewAgent(cfg)
	if err != nil {
		printError(err)
		return
	}
	defer agent.Close()
	s, err := agent.Stream(context.Background(), prompt)
	if err != nil {
		printError(err)
		return
	}
	defer s.Close()
	for index := 0; ; index++ {
		ev, err := s.Next()
		if errors.Is(err, panto.Done) {
			return
		}
		if err != nil {
			printError(err)
			return
		}
		printJSON(ev)
		if index == cancelAfter {
			s.Cancel()
		}
	}
}
