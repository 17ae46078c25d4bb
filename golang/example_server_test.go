package panto

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// The examples (example_test.go) are programs a user could run: they read
// OPENAI_BASE_URL (empty: OpenAI's API) and OPENAI_API_KEY, as the OpenAI SDKs do.
// TestMain points both at a stand-in provider for the whole test binary: a front that
// plays, for each conversation an example starts, its scenario on one panto-testserver
// (set before the conversation's first request, so the examples may run in any order,
// alone or again).

// exampleScenarios answers a conversation by its first request's prompt.
var exampleScenarios = []struct {
	prompt   string
	scenario func() obj
}{
	{"What is the weather in Paris?", weatherScenario},
	{"Say hello", func() obj { return scenario(exchange(sseResponse(textSSE("Hello", ", world.")))) }},
	{"Count to three", func() obj { return scenario(exchange(sseResponse(textSSE("One,", " two,", " three.")))) }},
	{"What is 19 + 23?", func() obj {
		return scenario(
			exchange(sseResponse(toolCallSSE([3]string{"call_1", "add", `{"a":19,"b":23}`}))),
			exchange(sseResponse(textSSE("19 + 23 = 42.")), "call_1"),
		)
	}},
	{"Divide 1 by 0", func() obj {
		return scenario(
			exchange(sseResponse(toolCallSSE([3]string{"call_1", "divide", `{"a":1,"b":0}`}))),
			exchange(sseResponse(textSSE("1 cannot be divided by 0.")), "call_1"),
		)
	}},
	{"Clean up old.log", func() obj {
		return scenario(
			exchange(sseResponse(toolCallSSE([3]string{"call_1", "delete_file", `{"path":"old.log"}`}))),
			exchange(sseResponse(textSSE("I deleted ", "old.log.")), `"tool_call_id":"call_1"`),
		)
	}},
	{"Name the largest city of Japan", func() obj {
		// Only a request carrying the struct's schema is answered.
		return scenario(exchange(sseResponse(textSSE(`{"name":"Tokyo","country":"Japan",`, `"population":14000000,"landmarks":["Tokyo Tower","Senso-ji"]}`)),
			`"response_format"`, `"name":"City"`))
	}},
	{"Are you there?", func() obj {
		return scenario(exchange(obj{
			"status":  429,
			"headers": obj{"retry-after": "120"},
			"json":    obj{"error": obj{"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}},
		}))
	}},
}

// startExampleProvider starts the stand-in, sets the environment the examples read, and
// returns what stops it.
func startExampleProvider() (stop func(), err error) {
	dir, err := os.MkdirTemp("", "panto-example")
	if err != nil {
		return nil, err
	}
	bin := os.Getenv("PANTO_TESTSERVER")
	if bin == "" {
		bin = defaultServerBinary()
	}
	srv, stopServer, err := launchServer(bin, dir, obj{"exchanges": []any{}})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	backend, err := url.Parse(srv.url)
	if err != nil {
		stopServer()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	proxy := httputil.NewSingleHostReverseProxy(backend)
	proxy.FlushInterval = -1 // stream the events as they come
	transport := &http.Transport{DisableKeepAlives: true}
	proxy.Transport = transport
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if !strings.Contains(string(body), `"role":"tool"`) { // a conversation's first request
			for _, e := range exampleScenarios {
				if strings.Contains(string(body), e.prompt) {
					if err := srv.setScenario(e.scenario()); err != nil {
						http.Error(w, err.Error(), http.StatusInternalServerError)
						return
					}
				}
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		proxy.ServeHTTP(w, r)
	}))
	oldURL, hadURL := os.LookupEnv("OPENAI_BASE_URL")
	oldKey, hadKey := os.LookupEnv("OPENAI_API_KEY")
	_ = os.Setenv("OPENAI_BASE_URL", front.URL+"/v1")
	_ = os.Setenv("OPENAI_API_KEY", "sk-example") // never a real key to the stand-in
	return func() {
		front.Close()
		transport.CloseIdleConnections()
		stopServer()
		_ = os.RemoveAll(dir)
		restoreEnv("OPENAI_BASE_URL", oldURL, hadURL)
		restoreEnv("OPENAI_API_KEY", oldKey, hadKey)
	}, nil
}

func restoreEnv(name, value string, had bool) {
	if had {
		_ = os.Setenv(name, value)
	} else {
		_ = os.Unsetenv(name)
	}
}

// setScenario replaces the server's scenario (and rewinds it).
func (s *testServer) setScenario(sc obj) error {
	js, err := json.Marshal(sc)
	if err != nil {
		return err
	}
	resp, err := controlClient.Post(s.url+"/_panto/scenario", "application/json", bytes.NewReader(js))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("setting the scenario: HTTP %d", resp.StatusCode)
	}
	return nil
}

// The examples use only what a user of the package has: every panto.X they name is
// declared in a non-test file (they called StartExampleServer, from export_test.go,
// so go doc showed examples nobody could run).
func TestExamplesUseOnlyThePackagesAPI(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	for _, f := range pkgs["panto"].Files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					declared[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						declared[s.Name.Name] = true
					case *ast.ValueSpec:
						for _, n := range s.Names {
							declared[n.Name] = true
						}
					}
				}
			}
		}
	}
	examples, err := parser.ParseFile(fset, "example_test.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(examples, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "panto" && !declared[sel.Sel.Name] {
				t.Errorf("%s: panto.%s is not part of the package", fset.Position(sel.Pos()), sel.Sel.Name)
			}
		}
		return true
	})
	if len(declared) < 10 {
		t.Fatalf("only %d declarations found", len(declared))
	}
}

// ignoreDispatcher leaves out the ready set's dispatcher goroutine, which lives as long
// as the process (wait.go).
var ignoreDispatcher = goleak.IgnoreAnyFunction("github.com/panto/panto/panto.(*readySet).dispatch")

// verifyNoLeaks is goleak.VerifyNone but for the examples' stand-in provider, which
// serves the whole test binary.
func verifyNoLeaks(t *testing.T) {
	t.Helper()
	goleak.VerifyNone(t, goleak.IgnoreAnyFunction("net/http/httptest.(*Server).goServe.func1"), ignoreDispatcher)
}
