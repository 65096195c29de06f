package kubelet

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/util/exec"
)

// startServer serves the kubelet API of node n1 with pods from an indexer the test controls.
func startServer(t *testing.T, pods ...*corev1.Pod) (*nodeServer, cache.Indexer) {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, p := range pods {
		if err := idx.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	cert, roots, err := servingCert("127.0.0.1", []string{"n1"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := newNodeServer("n1", "127.0.0.1", cert, roots, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	s.pods = corelisters.NewPodLister(idx)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return s, idx
}

func insecureClient() *http.Client {
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
}

func get(t *testing.T, s *nodeServer, path string) (int, string) {
	t.Helper()
	resp, err := insecureClient().Get(s.self.String() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServerContainerLogs: /containerLogs over HTTPS, its errors, and a follow stream.
func TestServerContainerLogs(t *testing.T) {
	other := testPod("n2")
	other.Name = "elsewhere"
	s, _ := startServer(t, testPod("n1"), other)

	code, body := get(t, s, "/containerLogs/default/web-0/web?tailLines=1")
	if code != 200 || body != "fake log line 3 of pod default/web-0 container web: ready\n" {
		t.Errorf("tailLines=1: %d %q", code, body)
	}
	for path, want := range map[string]string{
		"/containerLogs/default/nope/web":                         `404 pod "nope" does not exist`,
		"/containerLogs/default/elsewhere/web":                    `404 pod "elsewhere" does not exist`,
		"/containerLogs/default/web-0/db":                         `404 container "db" not found in pod "web-0"`,
		"/containerLogs/default/web-0/web?previous=true":          `400 previous terminated container "web" in pod "web-0" not found`,
		"/containerLogs/default/web-0/web?tailLines=x":            `400 tailLines="x": want an integer >= 0`,
		"/attach/default/web-0/web?output=1":                      `501 {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"testenv fake kubelet: attach is not supported`,
		"/portForward/default/nope?port=80":                       `404 {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pod does not exist"`,
		"/stats/summary":                                          "404 testenv fake kubelet: GET /stats/summary is not served",
		"/exec/default/web-0/web?command=true":                    `400 {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"you must specify at least 1 of stdin, stdout, stderr","reason":"BadRequest","code":400}`,
		"/exec/default/web-0/db?command=true&output=1":            `404 {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"container not found (\"db\")","reason":"NotFound","code":404}`,
		"/exec/default/web-0/other-uid/web?command=true&output=1": `404 {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pod does not exist","reason":"NotFound","code":404}`,
	} {
		code, body := get(t, s, path)
		if got := fmt.Sprintf("%d %s", code, body); !strings.HasPrefix(got, want) {
			t.Errorf("GET %s: %q, want %q…", path, got, want)
		}
	}

	// follow: the tail line, then a new one every second.
	resp, err := insecureClient().Get(s.self.String() + "/containerLogs/default/web-0/web?follow=true&tailLines=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 0, 1024)
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(string(buf), "\n") < 2 && time.Now().Before(deadline) {
		tmp := make([]byte, 512)
		n, err := resp.Body.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if err != nil {
			break
		}
	}
	if lines := strings.Split(string(buf), "\n"); len(lines) < 3 || !strings.HasSuffix(lines[0], ": ready") ||
		!strings.HasPrefix(lines[1], "fake log line 4 of pod default/web-0 container web") {
		t.Errorf("follow stream: %q", buf)
	}
}

type execResult struct {
	stdout, stderr string
	err            error
}

func runExec(t *testing.T, s *nodeServer, kind string, stdin io.Reader, cmd ...string) execResult {
	t.Helper()
	return runExecCtx(t, context.Background(), s, kind, stdin, cmd...)
}

func runExecCtx(t *testing.T, ctx context.Context, s *nodeServer, kind string, stdin io.Reader, cmd ...string) execResult {
	t.Helper()
	q := url.Values{"command": cmd, "output": {"1"}, "error": {"1"}}
	if stdin != nil {
		q.Set("input", "1")
	}
	u := s.self
	u.Path, u.RawQuery = "/exec/default/web-0/web", q.Encode()
	cfg := &rest.Config{Host: s.self.String(), TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	var ex remotecommand.Executor
	var err error
	switch kind {
	case "spdy":
		ex, err = remotecommand.NewSPDYExecutor(cfg, "POST", &u)
	case "websocket":
		ex, err = remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
	case "websocket-v4":
		ex, err = remotecommand.NewWebSocketExecutorForProtocols(cfg, "GET", u.String(), "v4.channel.k8s.io")
	}
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: &out, Stderr: &errOut})
	return execResult{out.String(), errOut.String(), err}
}

func exitCode(err error) int {
	var ce exec.CodeExitError
	if errors.As(err, &ce) {
		return ce.Code
	}
	return -1
}

// TestServerExec runs the responder through the kubelet streaming server with client-go's
// SPDY executor, its WebSocket (v5, translated to SPDY by the fake kubelet) executor and a
// v4 WebSocket (served directly, what non-Go clients such as kube-rs speak).
func TestServerExec(t *testing.T) {
	s, idx := startServer(t, testPod("n1"))
	for _, kind := range []string{"spdy", "websocket", "websocket-v4"} {
		t.Run(kind, func(t *testing.T) {
			if r := runExec(t, s, kind, nil, "echo", "hello"); r.err != nil || r.stdout != "hello\n" {
				t.Errorf("echo hello: %+v", r)
			}
			// (WebSocket v4 cannot signal the end of stdin, so cat would never end there.)
			if kind != "websocket-v4" {
				if r := runExec(t, s, kind, strings.NewReader("from stdin\n"), "cat"); r.err != nil || r.stdout != "from stdin\n" {
					t.Errorf("cat: %+v", r)
				}
			}
			if r := runExec(t, s, kind, strings.NewReader("echo from stdin; exit 7\n"), "sh"); exitCode(r.err) != 7 || r.stdout != "from stdin\n" {
				t.Errorf("sh reading stdin: %+v", r)
			}
			if r := runExec(t, s, kind, nil, "sh", "-c", "false"); exitCode(r.err) != 1 {
				t.Errorf("sh -c false: %+v (exit code %d)", r, exitCode(r.err))
			}
			if r := runExec(t, s, kind, nil, "sh", "-c", "echo out; exit 42"); exitCode(r.err) != 42 || r.stdout != "out\n" {
				t.Errorf("exit 42: %+v", r)
			}
			r := runExec(t, s, kind, nil, "nosuch", "x")
			if exitCode(r.err) != 127 || r.stderr != "nosuch: command not found\n" || r.stdout != "" {
				t.Errorf("unknown command: %+v", r)
			}
			if r := runExec(t, s, kind, nil, "env"); r.err != nil || r.stdout != "HOSTNAME=web-0\nMODE=test\n" {
				t.Errorf("env: %+v", r)
			}
		})
	}

	t.Run("a client going away interrupts sleep", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		t0 := time.Now()
		r := runExecCtx(t, ctx, s, "spdy", nil, "sleep", "20")
		if r.err == nil || time.Since(t0) > 5*time.Second {
			t.Errorf("sleep 20 cancelled after 0.5s: %+v after %v", r, time.Since(t0))
		}
		// and on the server side the command ends too.
		for deadline := time.Now().Add(5 * time.Second); s.active.Load() != 0; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d exec sessions still running on the server", s.active.Load())
			}
		}
	})

	t.Run("deleting the pod ends the session", func(t *testing.T) {
		go func() {
			time.Sleep(300 * time.Millisecond)
			idx.Delete(testPod("n1"))
		}()
		t0 := time.Now()
		r := runExec(t, s, "spdy", nil, "sh", "-c", "sleep 20; echo never")
		if r.stdout != "" || time.Since(t0) > 10*time.Second {
			t.Errorf("sleep 20 in a deleted pod: %+v after %v", r, time.Since(t0))
		}
		if exitCode(r.err) != interruptedCode {
			t.Errorf("exit code %d, want %d", exitCode(r.err), interruptedCode)
		}
	})
}
