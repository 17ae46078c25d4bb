package panto

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// Usage a server did not report is unknown, not zero (usage-unreported.json): turn 1 is
// answered with no usage at all, as llama.cpp answers; turn 2 reports a real zero.
// Usage.Reported tells them apart, in MessageEnd and in MessageComplete.
func TestUnreportedUsageIsNotZero(t *testing.T) {
	srv := startServer(t, sharedScenario(t, "usage-unreported.json"))
	agent := newTestAgent(t, testConfig(srv))
	for turn, want := range []bool{false, true} {
		s, err := agent.Stream(context.Background(), "hello")
		if err != nil {
			t.Fatal(err)
		}
		var usages []Usage
		for _, ev := range drainTurn(t, s) {
			switch e := ev.(type) {
			case *MessageEnd:
				usages = append(usages, e.Usage)
			case *MessageComplete:
				usages = append(usages, e.Usage)
				js, err := json.Marshal(e)
				wantJSON := `"reported":false`
				if want {
					wantJSON = `"reported":true`
				}
				if err != nil || !strings.Contains(string(js), wantJSON) {
					t.Fatalf("turn %d: canonical JSON %s %v", turn+1, js, err)
				}
			}
		}
		if len(usages) != 2 {
			t.Fatalf("turn %d: %d usages", turn+1, len(usages))
		}
		for _, u := range usages {
			if u != (Usage{Reported: want}) {
				t.Fatalf("turn %d: usage %+v, want all counts 0 and Reported %v", turn+1, u, want)
			}
		}
	}
}
