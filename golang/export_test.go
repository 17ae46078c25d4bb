package panto

import (
	"fmt"
	"os"
	"sync"
)

// The examples (package panto_test) talk to a panto-testserver started here.
var (
	exampleMu    sync.Mutex
	exampleStops []func()
)

// StartExampleServer starts panto-testserver for one example and returns the base URL to
// put in Config.BaseURL. The servers stop when the tests end.
func StartExampleServer(name string) string {
	var sc obj
	switch name {
	case "weather":
		sc = weatherScenario()
	case "hello":
		sc = scenario(exchange(sseResponse(textSSE("Hello", ", world."))))
	default:
		panic("no example scenario " + name)
	}
	dir, err := os.MkdirTemp("", "panto-example")
	if err != nil {
		panic(err)
	}
	bin := os.Getenv("PANTO_TESTSERVER")
	if bin == "" {
		bin = defaultServerBinary()
	}
	srv, stop, err := launchServer(bin, dir, sc)
	if err != nil {
		panic(fmt.Sprint("example server: ", err))
	}
	exampleMu.Lock()
	exampleStops = append(exampleStops, stop, func() { _ = os.RemoveAll(dir) })
	exampleMu.Unlock()
	return srv.url + "/v1"
}

func stopExampleServers() {
	exampleMu.Lock()
	defer exampleMu.Unlock()
	for _, f := range exampleStops {
		f()
	}
	exampleStops = nil
}

// setMaxBlockedWaits replaces the bound on goroutines waiting inside the library (no
// stream may be waiting) and returns what restores it.
func setMaxBlockedWaits(n int) func() {
	old := slots.Swap(newWaitSlots(n))
	return func() { slots.Store(old) }
}
