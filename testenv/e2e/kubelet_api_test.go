package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/util/exec"
	"k8s.io/utils/ptr"

	"github.com/flotilla/flotilla/testenv/internal/env"
	"github.com/flotilla/flotilla/testenv/internal/kubelet"
)

func restConfigFor(t *testing.T, m env.MemberInfo) *rest.Config {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", m.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// kubeletPorts returns each node's status.daemonEndpoints.kubeletEndpoint.port and checks
// what the fake kubelet reports with it.
func kubeletPorts(ctx context.Context, cs kubernetes.Interface) (map[string]int32, error) {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	ports := map[string]int32{}
	seen := map[int32]string{}
	for _, n := range nodes.Items {
		p := n.Status.DaemonEndpoints.KubeletEndpoint.Port
		if p <= 0 || p == 10250 {
			return nil, fmt.Errorf("node %s reports kubelet port %d", n.Name, p)
		}
		if other, dup := seen[p]; dup {
			return nil, fmt.Errorf("nodes %s and %s report the same kubelet port %d", other, n.Name, p)
		}
		if len(n.Status.Addresses) != 1 || n.Status.Addresses[0].Type != corev1.NodeInternalIP || n.Status.Addresses[0].Address != "127.0.0.1" {
			return nil, fmt.Errorf("node %s addresses %v", n.Name, n.Status.Addresses)
		}
		if len(n.Status.DeclaredFeatures) != 1 || n.Status.DeclaredFeatures[0] != kubelet.ExtendWebSocketsToKubelet {
			return nil, fmt.Errorf("node %s declared features %v", n.Name, n.Status.DeclaredFeatures)
		}
		seen[p], ports[n.Name] = n.Name, p
	}
	return ports, nil
}

// runningPod creates a pod and waits until the fake kubelet runs it.
func runningPod(t *testing.T, cs kubernetes.Interface, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	eventually(t, 60*time.Second, "pod "+pod.Name+" is Running", func() error {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %q", p.Status.Phase)
		}
		got = p
		return nil
	})
	return got
}

type execOut struct {
	stdout, stderr string
	err            error
}

// podExec runs cmd in the pod's container through kube-apiserver's pods/exec with one of
// client-go's executors: "spdy", "websocket" (v5, what kubectl ≥ 1.31 uses first) or
// "websocket-v4" (what non-Go clients such as kube-rs speak).
func podExec(t *testing.T, rc *rest.Config, cs kubernetes.Interface, pod *corev1.Pod, kind, stdin string, cmd ...string) execOut {
	t.Helper()
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: pod.Spec.Containers[0].Name, Command: cmd,
			Stdin: stdin != "", Stdout: true, Stderr: true}, scheme.ParameterCodec)
	var ex remotecommand.Executor
	var err error
	switch kind {
	case "spdy":
		ex, err = remotecommand.NewSPDYExecutor(rc, "POST", req.URL())
	case "websocket":
		ex, err = remotecommand.NewWebSocketExecutor(rc, "GET", req.URL().String())
	case "websocket-v4":
		ex, err = remotecommand.NewWebSocketExecutorForProtocols(rc, "GET", req.URL().String(), "v4.channel.k8s.io")
	default:
		t.Fatalf("executor %q", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	opts := remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut}
	if stdin != "" {
		opts.Stdin = strings.NewReader(stdin)
	}
	err = ex.StreamWithContext(ctx, opts)
	return execOut{out.String(), errOut.String(), err}
}

func exitCodeOf(err error) int {
	var ce exec.CodeExitError
	if errors.As(err, &ce) {
		return ce.Code
	}
	return -1
}

// testKubeletAPI: kube-apiserver's pods/log and pods/exec reach the fake kubelet of a
// member with workloads.
func testKubeletAPI(t *testing.T, m env.MemberInfo) {
	ctx := context.Background()
	cs := clientFor(t, m)
	rc := restConfigFor(t, m)

	ports, err := kubeletPorts(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s kubelet ports: %v", m.Name, ports)

	pod := runningPod(t, cs, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "shell", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox:1.36",
			Env: []corev1.EnvVar{{Name: "GREETING", Value: "hello from the spec"}}}}},
	})
	logs := func(opts *corev1.PodLogOptions) (string, error) {
		// Stream, as kubectl does (its errors carry the server's message).
		rc, err := cs.CoreV1().Pods("default").GetLogs("shell", opts).Stream(ctx)
		if err != nil {
			return "", err
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		return string(b), err
	}

	t.Run("logs", func(t *testing.T) {
		all, err := logs(&corev1.PodLogOptions{Container: "app"})
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(all, "\n"), "\n")
		if len(lines) != 3 || !strings.Contains(lines[0], "pod default/shell container app: started, image busybox:1.36, node "+pod.Spec.NodeName) ||
			lines[2] != "fake log line 3 of pod default/shell container app: ready" {
			t.Errorf("logs:\n%s", all)
		}
		tail, err := logs(&corev1.PodLogOptions{TailLines: ptr.To[int64](1)})
		if err != nil || tail != lines[2]+"\n" {
			t.Errorf("TailLines 1: %q %v", tail, err)
		}
		ts, err := logs(&corev1.PodLogOptions{TailLines: ptr.To[int64](1), Timestamps: true})
		if stamp, rest, _ := strings.Cut(ts, " "); err != nil || rest != lines[2]+"\n" || !validStamp(stamp) {
			t.Errorf("Timestamps: %q %v", ts, err)
		}
		if lim, err := logs(&corev1.PodLogOptions{LimitBytes: ptr.To[int64](12)}); err != nil || lim != all[:12] {
			t.Errorf("LimitBytes 12: %q %v", lim, err)
		}
		if _, err := logs(&corev1.PodLogOptions{Container: "nope"}); err == nil || !strings.Contains(err.Error(), "container nope is not valid for pod shell") {
			t.Errorf("logs of a container not in the pod: %v", err)
		}
		if _, err := logs(&corev1.PodLogOptions{Previous: true}); err == nil ||
			!strings.Contains(err.Error(), `previous terminated container "app" in pod "shell" not found`) {
			t.Errorf("Previous: %v", err)
		}
	})

	t.Run("logs follow", func(t *testing.T) {
		fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		stream, err := cs.CoreV1().Pods("default").GetLogs("shell", &corev1.PodLogOptions{Follow: true, TailLines: ptr.To[int64](1)}).Stream(fctx)
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		r := bufio.NewReader(stream)
		var got []string
		for len(got) < 2 {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("after %q: %v", got, err)
			}
			got = append(got, line)
		}
		if !strings.HasSuffix(got[0], ": ready\n") || got[1] != "fake log line 4 of pod default/shell container app: still running\n" {
			t.Errorf("follow: %q", got)
		}
	})

	for _, kind := range []string{"spdy", "websocket", "websocket-v4"} {
		t.Run("exec over "+kind, func(t *testing.T) {
			if r := podExec(t, rc, cs, pod, kind, "", "echo", "hello"); r.err != nil || r.stdout != "hello\n" || r.stderr != "" {
				t.Errorf("echo hello: %+v", r)
			}
			// WebSocket v4 cannot signal the end of stdin (v5 added that), so cat would not end.
			if kind != "websocket-v4" {
				if r := podExec(t, rc, cs, pod, kind, "line one\nline two\n", "cat"); r.err != nil || r.stdout != "line one\nline two\n" {
					t.Errorf("cat: %+v", r)
				}
			}
			if r := podExec(t, rc, cs, pod, kind, "", "sh", "-c", "false"); exitCodeOf(r.err) != 1 {
				t.Errorf("sh -c false: %+v (exit code %d)", r, exitCodeOf(r.err))
			}
			r := podExec(t, rc, cs, pod, kind, "", "no-such-command", "--flag")
			if exitCodeOf(r.err) != 127 || r.stderr != "no-such-command: command not found\n" {
				t.Errorf("unknown command: %+v (exit code %d)", r, exitCodeOf(r.err))
			}
			if r := podExec(t, rc, cs, pod, kind, "", "sh", "-c", `hostname && echo "$GREETING"; exit 3`); exitCodeOf(r.err) != 3 ||
				r.stdout != "shell\nhello from the spec\n" {
				t.Errorf("sh -c script: %+v", r)
			}
		})
	}

	t.Run("kube-apiserver passes WebSocket exec through to the fake kubelet", func(t *testing.T) {
		// The nodes declare ExtendWebSocketsToKubelet, so kube-apiserver proxies WebSocket
		// v5 exec as it is (the fake kubelet translates it) instead of translating itself.
		body, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		proxied := false
		for _, l := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(l, "apiserver_stream_translator_requests_total{") {
				t.Errorf("kube-apiserver translated a WebSocket request itself: %s", l)
			}
			if strings.HasPrefix(l, "apiserver_websocket_streaming_requests_total{") &&
				strings.Contains(l, `proxy_type="proxied_to_kubelet"`) && strings.Contains(l, `subresource="exec"`) {
				proxied = true
			}
		}
		if !proxied {
			t.Error(`no apiserver_websocket_streaming_requests_total{proxy_type="proxied_to_kubelet",subresource="exec"} in /metrics`)
		}
	})

	t.Run("attach is refused clearly", func(t *testing.T) {
		req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name("shell").SubResource("attach").
			VersionedParams(&corev1.PodAttachOptions{Container: "app", Stdout: true}, scheme.ParameterCodec)
		ex, err := remotecommand.NewSPDYExecutor(rc, "POST", req.URL())
		if err != nil {
			t.Fatal(err)
		}
		err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard})
		if err == nil || !strings.Contains(err.Error(), "attach is not supported") {
			t.Errorf("attach: %v", err)
		}
	})
}

func validStamp(s string) bool {
	ts, err := time.Parse(time.RFC3339Nano, s)
	return err == nil && len(s) == len("2006-01-02T15:04:05.000000000Z") && time.Since(ts) < time.Hour
}
