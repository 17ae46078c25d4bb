// Command client is the Go row of scripts/bench.sh: panto's Go binding (Next and Iter)
// and openai-go consuming the same responses from the same panto-testserver as the
// other clients, with the command line and output of tests/peers-bench:
//
//	client turns VARIANT BASE_URL TURNS
//	client concurrency VARIANT BASE_URL STREAMS PACE_MS [RAMP_MS]
//
// Variants: panto-next (Stream.Next), panto-iter (Stream.Iter), openai-go
// (Chat.Completions.NewStreaming, Next/Current). One JSON line per turn: wall, CPU
// (getrusage: every thread, Go's runtime and panto's worker), time to first event, the
// chunks carrying text or tool-argument fragments, peak RSS. Turn 0 is cold: the client
// or agent is created inside it. The concurrency mode runs STREAMS turns at once, one
// goroutine each, and reports the gaps between consecutive content events minus the
// server's pacing: panto-iter (one agent each, so one connection each, Stream.Iter) or
// openai-go (one client shared by every goroutine, as its users would; its transport
// opens a connection per concurrent stream). With RAMP_MS, stream i starts
// i×RAMP_MS/STREAMS after the first (as in tests/peers-bench). Its line carries GOMAXPROCS.
//
// A benchmark program: any failure makes the figures meaningless, so it exits 1.
package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/panto/panto/panto"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakRSSKiB is VmHWM: Linux carries ru_maxrss over fork + exec from the parent.
func peakRSSKiB() int64 {
	data, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

func die(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "client: "+format+"\n", args...)
	os.Exit(1)
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func newAgent(base string) *panto.Agent {
	// MaxSteps 1: the tool workload's call names no tool of this agent; it gets an error
	// result and the turn ends after this one response, as openai-go's does.
	a, err := panto.NewAgent(panto.Config{Model: "gpt-4o", BaseURL: base, APIKey: "sk-bench",
		MaxSteps: 1, Retry: panto.Retry{MaxRetries: panto.Int(0)}})
	if err != nil {
		die("agent: %v", err)
	}
	return a
}

// seen is what one turn saw.
type seen struct {
	items   int
	first   time.Time
	touched int
}

func (s *seen) event() {
	if s.first.IsZero() {
		s.first = time.Now()
	}
}

func (s *seen) content(ev panto.Event) {
	if d, ok := ev.(*panto.ContentDelta); ok {
		s.touched += len(d.Text)
		s.items++
	}
}

func pantoNext(agent *panto.Agent, s *seen) {
	stream, err := agent.Stream(context.Background(), "bench")
	if err != nil {
		die("stream: %v", err)
	}
	defer stream.Close()
	for {
		ev, err := stream.Next()
		if err == panto.ErrDone {
			return
		}
		if err != nil {
			die("next: %v", err)
		}
		s.event()
		s.content(ev)
	}
}

func pantoIter(agent *panto.Agent, s *seen) {
	stream, err := agent.Stream(context.Background(), "bench")
	if err != nil {
		die("stream: %v", err)
	}
	defer stream.Close()
	for ev := range stream.Iter() {
		s.event()
		s.content(ev)
	}
	if err := stream.Err(); err != nil {
		die("iter: %v", err)
	}
}

func openaiGo(client *openai.Client, s *seen) {
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:    "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("bench")},
	})
	defer stream.Close()
	for stream.Next() {
		s.event()
		c := stream.Current()
		if len(c.Choices) == 0 {
			continue
		}
		d := c.Choices[0].Delta
		text := d.Content
		if len(d.ToolCalls) > 0 {
			text = d.ToolCalls[0].Function.Arguments
		}
		if text != "" {
			s.touched += len(text)
			s.items++
		}
	}
	if err := stream.Err(); err != nil {
		die("openai-go: %v", err)
	}
}

func runTurns(variant, base string, turns int) {
	var agent *panto.Agent
	var client *openai.Client
	for turn := range turns {
		if agent != nil {
			if err := agent.ClearHistory(); err != nil {
				die("clear history: %v", err)
			}
		}
		var s seen
		cpu0, t0 := cpuTime(), time.Now()
		switch variant {
		case "panto-next", "panto-iter":
			if agent == nil {
				agent = newAgent(base)
			}
			if variant == "panto-next" {
				pantoNext(agent, &s)
			} else {
				pantoIter(agent, &s)
			}
		case "openai-go":
			if client == nil {
				c := openai.NewClient(option.WithBaseURL(base+"/"), option.WithAPIKey("sk-bench"),
					option.WithMaxRetries(0))
				client = &c
			}
			openaiGo(client, &s)
		default:
			die("unknown variant %q", variant)
		}
		wall, used := time.Since(t0), cpuTime()-cpu0
		fmt.Printf(`{"turn":%d,"wall_us":%.1f,"cpu_us":%.1f,"ttfe_us":%.1f,"items":%d,"peak_rss_kib":%d}`+"\n",
			turn, us(wall), us(used), us(s.first.Sub(t0)), s.items, peakRSSKiB())
	}
	if agent != nil {
		_ = agent.Close()
	}
}

// pantoIterPaced consumes one panto stream with Iter, recording the gaps between content
// events minus pace.
func pantoIterPaced(agent *panto.Agent, pace time.Duration) (int, []int64) {
	var local []int64
	var last time.Time
	n := 0
	s, err := agent.Stream(context.Background(), "bench")
	if err != nil {
		die("stream: %v", err)
	}
	defer s.Close()
	for ev := range s.Iter() {
		if d, ok := ev.(*panto.ContentDelta); ok {
			_ = d.Text
			n++
			now := time.Now()
			if !last.IsZero() {
				local = append(local, max(0, now.Sub(last)-pace).Microseconds())
			}
			last = now
		}
	}
	if err := s.Err(); err != nil {
		die("iter: %v", err)
	}
	return n, local
}

// openaiGoPaced consumes one openai-go stream, recording the same gaps.
func openaiGoPaced(client *openai.Client, pace time.Duration) (int, []int64) {
	var local []int64
	var last time.Time
	n := 0
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:    "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("bench")},
	})
	defer stream.Close()
	for stream.Next() {
		c := stream.Current()
		if len(c.Choices) == 0 || c.Choices[0].Delta.Content == "" {
			continue
		}
		_ = c.Choices[0].Delta.Content
		n++
		now := time.Now()
		if !last.IsZero() {
			local = append(local, max(0, now.Sub(last)-pace).Microseconds())
		}
		last = now
	}
	if err := stream.Err(); err != nil {
		die("openai-go: %v", err)
	}
	return n, local
}

func runConcurrency(variant, base string, streams int, pace, ramp time.Duration) {
	var client *openai.Client
	switch variant {
	case "panto-iter":
	case "openai-go":
		c := openai.NewClient(option.WithBaseURL(base+"/"), option.WithAPIKey("sk-bench"),
			option.WithMaxRetries(0))
		client = &c
	default:
		die("unknown concurrency variant %q", variant)
	}
	cpu0, t0 := cpuTime(), time.Now()
	var mu sync.Mutex
	var gaps []int64
	items := 0
	var ready, wg sync.WaitGroup
	start := make(chan struct{})
	var t0ramp time.Time
	wait := func(i int) {
		<-start
		if ramp > 0 {
			time.Sleep(time.Until(t0ramp.Add(time.Duration(float64(ramp) * float64(i) / float64(streams)))))
		}
	}
	for i := range streams {
		wg.Add(1)
		ready.Add(1)
		go func() {
			defer wg.Done()
			var n int
			var local []int64
			if client != nil {
				ready.Done()
				wait(i)
				n, local = openaiGoPaced(client, pace)
			} else {
				agent := newAgent(base)
				defer agent.Close()
				ready.Done()
				wait(i)
				n, local = pantoIterPaced(agent, pace)
			}
			mu.Lock()
			gaps = append(gaps, local...)
			items += n
			mu.Unlock()
		}()
	}
	ready.Wait()
	t0ramp = time.Now()
	close(start)
	wg.Wait()
	wall, used := time.Since(t0), cpuTime()-cpu0
	slices.Sort(gaps)
	pct := func(p int) int64 {
		if len(gaps) == 0 {
			return 0
		}
		return gaps[min(len(gaps)*p/100, len(gaps)-1)]
	}
	fmt.Printf(`{"streams":%d,"items":%d,"wall_us":%.1f,"cpu_us":%.1f,"added_p50_us":%d,"added_p99_us":%d,"peak_rss_kib":%d,"gomaxprocs":%d}`+"\n",
		streams, items, us(wall), us(used), pct(50), pct(99), peakRSSKiB(), runtime.GOMAXPROCS(0))
}

func main() {
	a := os.Args
	switch {
	case len(a) == 5 && a[1] == "turns":
		n, err := strconv.Atoi(a[4])
		if err != nil {
			die("TURNS: %v", err)
		}
		runTurns(a[2], a[3], n)
	case (len(a) == 6 || len(a) == 7) && a[1] == "concurrency":
		s, err1 := strconv.Atoi(a[4])
		p, err2 := strconv.Atoi(a[5])
		r, err3 := 0, error(nil)
		if len(a) == 7 {
			r, err3 = strconv.Atoi(a[6])
		}
		if err1 != nil || err2 != nil || err3 != nil {
			die("STREAMS, PACE_MS and RAMP_MS are numbers")
		}
		runConcurrency(a[2], a[3], s, time.Duration(p)*time.Millisecond, time.Duration(r)*time.Millisecond)
	default:
		fmt.Fprintln(os.Stderr, "usage: client turns VARIANT BASE_URL TURNS\n       client concurrency panto-iter|openai-go BASE_URL STREAMS PACE_MS [RAMP_MS]")
		os.Exit(2)
	}
}
