// Command conformance is the conformance runner for Go: it runs one turn described on
// the command line and prints its trace, built from the fields of each Event the stream
// returns (trace.go), then the error line, built from the *panto.Error's fields, if the
// turn failed.
// scripts/conformance.sh compares it with the scenario's golden trace; the arguments,
// shared by every language's runner, are described in tests/conformance/README.md.
//
//	conformance --config JSON (--prompt TEXT | --input PARTS) [--cancel-after K]
//	  [--answer NAME DELAY_MS IS_ERROR OUTPUT | --answer-parts NAME DELAY_MS IS_ERROR PARTS]...
//	  [--resume (end | K) ANSWERS] [--after-resume NAME]... [--steer-during NAME TEXT]
//
// Tools with an answer get a Func (a PartsFunc for --answer-parts), so the binding runs
// them itself (in goroutines) and turns a returned error into an error result; a tool
// never answered has neither. PARTS is the input form's JSON, made into panto.Part values
// with the package's constructors (parts.go), so a constructor that lost a part fails.
//
// With --resume, the runner takes Stream.Checkpoint when the turn ends, or right after
// event K (then cancels that turn and prints no more of it), prints {"runner":"resume"},
// and continues the checkpoint with Agent.Resume on a new agent of the same
// configuration, ANSWERS (by call id) made into panto.Answers with Approve, Reject and
// Result. In the first turn, a tool named by --after-resume gets a Func that waits for
// its context (it is answered only after the resume), and the Func of the tool named by
// --steer-during calls Stream.Steer before it returns.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/panto/panto/panto"
)

type answer struct {
	delay   time.Duration
	never   bool
	isError bool
	output  string
	parts   []panto.Part // for --answer-parts
}

// jsonPart is one part of the input form: a string (text) or an attachment by its
// base64 data or URL.
type jsonPart struct {
	Type      string `json:"type"`
	Text      string `json:"text"`
	Data      []byte `json:"data"`
	URL       string `json:"url"`
	MediaType string `json:"media_type"`
	Name      string `json:"name"`
}

// parseParts makes panto.Part values of the input form's JSON.
func parseParts(text string) ([]panto.Part, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(text), &raw); err != nil {
		return nil, err
	}
	parts := make([]panto.Part, 0, len(raw))
	for i, r := range raw {
		var s string
		if json.Unmarshal(r, &s) == nil {
			parts = append(parts, panto.Text(s))
			continue
		}
		var p jsonPart
		if err := json.Unmarshal(r, &p); err != nil {
			return nil, fmt.Errorf("part %d: %w", i, err)
		}
		var part panto.Part
		switch {
		case p.Type == "text":
			part = panto.Text(p.Text)
		case p.Type == "image" && p.URL != "":
			part = panto.ImageURL(p.URL)
		case p.Type == "image":
			part = panto.ImageBytes(p.Data, p.MediaType)
		case p.Type == "document" && p.URL != "":
			part = panto.DocumentURL(p.URL)
		case p.Type == "document":
			part = panto.DocumentBytes(p.Data)
		default:
			return nil, fmt.Errorf("part %d: type %q", i, p.Type)
		}
		if p.Name != "" {
			part = part.Named(p.Name)
		}
		parts = append(parts, part)
	}
	return parts, nil
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// firstTurn is what the first turn does besides answering tools: the tools it holds
// until the resume, and the steering one tool's Func sends (once) before it returns.
type firstTurn struct {
	held      map[string]bool
	steerTool string
	steerText string
	once      sync.Once
	stream    chan *panto.Stream // the first turn's stream, once started
}

// steer sends the steering message, the first time tool name runs.
func (f *firstTurn) steer(name string) {
	if f == nil || f.steerTool == "" || name != f.steerTool {
		return
	}
	f.once.Do(func() {
		s := <-f.stream
		if err := s.Steer(f.steerText); err != nil {
			fmt.Fprintln(os.Stderr, "conformance: steer:", err)
		}
	})
}

// buildConfig reads the configuration JSON with panto.Config's own UnmarshalJSON (an
// unknown key fails loudly) and gives each answered tool a Func. For the first turn of a
// resumed scenario (first non-nil), a held tool's Func waits for its context instead.
func buildConfig(text string, answers map[string]answer, first *firstTurn) (panto.Config, error) {
	var cfg panto.Config
	if err := json.Unmarshal([]byte(text), &cfg); err != nil {
		return panto.Config{}, fmt.Errorf("--config: %w", err)
	}
	for i, t := range cfg.Tools {
		name := t.Name
		if a, ok := answers[name]; ok && first != nil && first.held[name] {
			cfg.Tools[i].Func = func(ctx context.Context, _ json.RawMessage) (string, error) {
				<-ctx.Done()
				return "", ctx.Err()
			}
		} else if ok && !a.never && a.parts != nil {
			cfg.Tools[i].PartsFunc = func(ctx context.Context, _ json.RawMessage) ([]panto.Part, error) {
				if a.delay > 0 {
					select {
					case <-time.After(a.delay):
					case <-ctx.Done():
						return nil, ctx.Err()
					}
				}
				first.steer(name)
				return a.parts, nil
			}
		} else if ok && !a.never {
			cfg.Tools[i].Func = func(ctx context.Context, _ json.RawMessage) (string, error) {
				first.steer(name)
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
	Output       *string `json:"output,omitempty"`
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
	// The structured-output kinds always carry the raw answer (possibly empty); no
	// other kind has one.
	switch perr.Kind {
	case panto.KindOutputInvalid, panto.KindOutputRefused, panto.KindOutputTruncated:
		line.Output = &perr.Output
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

// parseAnswers makes panto.Answers of the answers JSON, by call id: {"approve": true},
// {"reject": REASON} or {"output": TEXT, "is_error"?: BOOL}.
func parseAnswers(text string) (panto.Answers, error) {
	var raw map[string]struct {
		Approve *bool   `json:"approve"`
		Reject  *string `json:"reject"`
		Output  *string `json:"output"`
		IsError bool    `json:"is_error"`
	}
	var answers panto.Answers
	if err := json.Unmarshal([]byte(text), &raw); err != nil {
		return answers, err
	}
	ids := make([]string, 0, len(raw))
	for id := range raw {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		a := raw[id]
		switch {
		case a.Approve != nil && *a.Approve:
			answers = answers.Approve(id)
		case a.Reject != nil:
			answers = answers.Reject(id, *a.Reject)
		case a.Output != nil:
			answers = answers.Result(id, *a.Output, a.IsError)
		default:
			return answers, fmt.Errorf("answer to %s: none of approve, reject, output", id)
		}
	}
	return answers, nil
}

// play prints the stream's events until it ends. With stopAfter >= 0 it takes the
// checkpoint right after event stopAfter and cancels the turn (the rest of it is never
// seen, as if its process died); with atEnd, it takes it when the turn has ended. The
// checkpoint is nil otherwise.
func play(s *panto.Stream, cancelAfter, stopAfter int, atEnd bool) panto.Checkpoint {
	defer s.Close()
	for index := 0; ; index++ {
		ev, err := s.Next()
		if errors.Is(err, panto.ErrDone) {
			break
		}
		if err != nil {
			printError(err)
			break
		}
		printJSON(eventTrace(ev))
		if index == stopAfter {
			cp, err := s.Checkpoint()
			if err != nil {
				fmt.Fprintln(os.Stderr, "conformance: checkpoint:", err)
			}
			s.Cancel()
			return cp
		}
		if index == cancelAfter {
			s.Cancel()
		}
	}
	if atEnd {
		cp, err := s.Checkpoint()
		if err != nil {
			fmt.Fprintln(os.Stderr, "conformance: checkpoint:", err)
		}
		return cp
	}
	return nil
}

func main() {
	var configText, prompt string
	var input []panto.Part
	cancelAfter := -1
	answers := map[string]answer{}
	first := &firstTurn{held: map[string]bool{}, stream: make(chan *panto.Stream, 1)}
	resumeAt, resumeAnswers := "", ""
	args := os.Args[1:]
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "--config" && i+1 < len(args):
			configText, i = args[i+1], i+1
		case args[i] == "--prompt" && i+1 < len(args):
			prompt, i = args[i+1], i+1
		case args[i] == "--input" && i+1 < len(args):
			parts, err := parseParts(args[i+1])
			if err != nil {
				fmt.Fprintln(os.Stderr, "conformance: bad --input:", err)
				os.Exit(2)
			}
			input, i = parts, i+1
		case args[i] == "--answer-parts" && i+4 < len(args):
			delay, err := strconv.Atoi(args[i+2])
			parts, perr := parseParts(args[i+4])
			if err != nil || perr != nil || args[i+3] == "true" {
				fmt.Fprintln(os.Stderr, "conformance: bad --answer-parts (an error result has no parts here)")
				os.Exit(2)
			}
			answers[args[i+1]] = answer{delay: ms(int64(delay)), never: delay < 0, parts: parts}
			i += 4
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
		case args[i] == "--resume" && i+2 < len(args):
			resumeAt, resumeAnswers, i = args[i+1], args[i+2], i+2
		case args[i] == "--after-resume" && i+1 < len(args):
			first.held[args[i+1]], i = true, i+1
		case args[i] == "--steer-during" && i+2 < len(args):
			first.steerTool, first.steerText, i = args[i+1], args[i+2], i+2
		default:
			fmt.Fprintln(os.Stderr, "conformance: bad argument", args[i])
			os.Exit(2)
		}
	}
	stopAfter := -1
	if resumeAt != "" && resumeAt != "end" {
		n, err := strconv.Atoi(resumeAt)
		if err != nil {
			fmt.Fprintln(os.Stderr, "conformance: bad --resume")
			os.Exit(2)
		}
		stopAfter = n
	}
	cfg, err := buildConfig(configText, answers, first)
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
	var s *panto.Stream
	if input != nil {
		s, err = agent.StreamParts(context.Background(), input...)
	} else {
		s, err = agent.Stream(context.Background(), prompt)
	}
	if err != nil {
		printError(err)
		return
	}
	first.stream <- s
	cp := play(s, cancelAfter, stopAfter, resumeAt == "end")
	if cp == nil {
		return
	}
	fmt.Println(`{"runner":"resume"}`)
	cfg, err = buildConfig(configText, answers, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(2)
	}
	resumed, err := panto.NewAgent(cfg)
	if err != nil {
		printError(err)
		return
	}
	defer resumed.Close()
	ans, err := parseAnswers(resumeAnswers)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance: bad --resume ANSWERS:", err)
		os.Exit(2)
	}
	rs, err := resumed.Resume(context.Background(), cp, ans)
	if err != nil {
		printError(err)
		return
	}
	play(rs, -1, -1, false)
}
