// Package bench measures the Go binding against openai-go, the official OpenAI SDK,
// on the same responses from the same local panto-testserver, in one process. It is a
// module of its own so the panto module does not depend on openai-go.
//
//	go test -run '^$' -bench . -benchtime 3x
//
// Figures: cpu-ns/chunk is the process's CPU time (user + system, every thread: Go's
// and panto's workers; the server is another process) per streamed chunk.
package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/panto/panto/panto"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

const chunks = 100_000

type obj = map[string]any

func contentChunk(text string) obj {
	return obj{"data": obj{"id": "chatcmpl-b", "object": "chat.completion.chunk", "created": 1730000000,
		"model": "gpt-test", "choices": []any{obj{"index": 0, "delta": obj{"content": text}, "finish_reason": nil}}}}
}

func tail() []any {
	return []any{
		obj{"data": obj{"id": "chatcmpl-b", "object": "chat.completion.chunk", "created": 1730000000,
			"model": "gpt-test", "choices": []any{obj{"index": 0, "delta": obj{}, "finish_reason": "stop"}}}},
		obj{"data": "[DONE]"},
	}
}

// server starts panto-testserver answering every request with response.
func server(b *testing.B, response obj) string {
	bin := os.Getenv("PANTO_TESTSERVER")
	if bin == "" {
		dir := os.Getenv("CARGO_TARGET_DIR")
		if dir == "" {
			dir = filepath.Join("..", "..", "target")
		}
		bin = filepath.Join(dir, "release", "panto-testserver")
	}
	sc := obj{"exchanges": []any{obj{"times": 1_000_000, "response": response}}}
	js, _ := json.Marshal(sc)
	file := filepath.Join(b.TempDir(), "scenario.json")
	if err := os.WriteFile(file, js, 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "--scenario", file, "--port", "0", "--exit-on-stdin-eof")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		b.Fatalf("panto-testserver: %q %v", line, err)
	}
	return url
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func bigResponse() obj {
	return obj{"status": 200, "repeat": obj{"count": chunks, "chunk": contentChunk("x")}, "sse": tail()}
}

// measure runs turn b.N times and reports CPU and allocations per chunk.
func measure(b *testing.B, turn func() int) {
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	cpu0 := cpuTime()
	b.ResetTimer()
	total := 0
	for range b.N {
		total += turn()
	}
	b.StopTimer()
	cpu := cpuTime() - cpu0
	runtime.ReadMemStats(&ms1)
	if total < b.N*chunks {
		b.Fatalf("only %d chunks for %d turns", total, b.N)
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(total), "cpu-ns/chunk")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(total), "ns/chunk")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(total), "allocs/chunk")
}

func pantoAgent(b *testing.B, url string) *panto.Agent {
	a, err := panto.NewAgent(panto.Config{Model: "gpt-test", BaseURL: url + "/v1", APIKey: "k",
		Retry: panto.Retry{MaxRetries: panto.Int(0)}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = a.Close() })
	return a
}

// BenchmarkPantoNext: 100,000 chunks through Stream.Next.
func BenchmarkPantoNext(b *testing.B) {
	agent := pantoAgent(b, server(b, bigResponse()))
	measure(b, func() int {
		_ = agent.ClearHistory()
		s, err := agent.Stream(context.Background(), "go")
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		n := 0
		for {
			ev, err := s.Next()
			if err == panto.ErrDone {
				return n
			}
			if err != nil {
				b.Fatal(err)
			}
			if _, ok := ev.(*panto.ContentDelta); ok {
				n++
			}
		}
	})
}

// BenchmarkPantoIter: the same through Stream.Iter.
func BenchmarkPantoIter(b *testing.B) {
	agent := pantoAgent(b, server(b, bigResponse()))
	measure(b, func() int {
		_ = agent.ClearHistory()
		s, err := agent.Stream(context.Background(), "go")
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for ev := range s.Iter() {
			if _, ok := ev.(*panto.ContentDelta); ok {
				n++
			}
		}
		if s.Err() != nil {
			b.Fatal(s.Err())
		}
		return n
	})
}

// BenchmarkOpenAIGo: the same response through openai-go v3 (NewStreaming, Next/Current).
func BenchmarkOpenAIGo(b *testing.B) {
	url := server(b, bigResponse())
	client := openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	measure(b, func() int {
		stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
			Model:    "gpt-test",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("go")},
		})
		defer stream.Close()
		n := 0
		for stream.Next() {
			c := stream.Current()
			if len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
				n++
			}
		}
		if err := stream.Err(); err != nil {
			b.Fatal(err)
		}
		return n
	})
}

func procStatus(key string) string {
	data, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// BenchmarkConcurrent1000: 1,000 streams at once from one process, each 50 chunks paced
// 20 ms apart by the server. Added latency per event is the gap between two consecutive
// chunks minus the 20 ms pacing (never below 0); reported at p99, with the peak OS
// threads and RSS.
func BenchmarkConcurrent1000(b *testing.B) {
	const streams, perStream, pace = 1000, 50, 20 * time.Millisecond
	items := []any{}
	for range perStream {
		items = append(items, contentChunk("y"))
	}
	url := server(b, obj{"status": 200, "chunk_delay_ms": pace.Milliseconds(), "sse": append(items, tail()...)})
	for range b.N {
		var mu sync.Mutex
		var added []time.Duration
		var wg sync.WaitGroup
		peakThreads, peakRSS := "", ""
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
					mu.Lock()
					t, r := procStatus("Threads"), procStatus("VmRSS")
					if len(t) > len(peakThreads) || (len(t) == len(peakThreads) && t > peakThreads) {
						peakThreads = t
					}
					if len(r) > len(peakRSS) || (len(r) == len(peakRSS) && r > peakRSS) {
						peakRSS = r
					}
					mu.Unlock()
				}
			}
		}()
		for range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a, err := panto.NewAgent(panto.Config{Model: "gpt-test", BaseURL: url + "/v1", APIKey: "k",
					Retry: panto.Retry{MaxRetries: panto.Int(0)}})
				if err != nil {
					b.Error(err)
					return
				}
				defer a.Close()
				s, err := a.Stream(context.Background(), "go")
				if err != nil {
					b.Error(err)
					return
				}
				var local []time.Duration
				var last time.Time
				for ev := range s.Iter() {
					if _, ok := ev.(*panto.ContentDelta); ok {
						now := time.Now()
						if !last.IsZero() {
							local = append(local, max(0, now.Sub(last)-pace))
						}
						last = now
					}
				}
				if s.Err() != nil {
					b.Error(s.Err())
				}
				mu.Lock()
				added = append(added, local...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		close(stop)
		mu.Lock()
		slices.Sort(added)
		p99 := time.Duration(0)
		if len(added) > 0 {
			p99 = added[len(added)*99/100]
		}
		b.ReportMetric(float64(p99.Microseconds()), "p99-added-µs")
		fmt.Printf("[concurrency] go: %d streams x %d paced chunks: p99 added latency %v, peak threads %s, peak RSS %s\n",
			streams, perStream, p99, peakThreads, peakRSS)
		mu.Unlock()
	}
}
