package kubelet

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var started = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

func testPod(node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-0", UID: "uid-1"},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{
			{Name: "web", Image: "nginx:1.27", Env: []corev1.EnvVar{{Name: "MODE", Value: "test"},
				{Name: "FROM_SECRET", ValueFrom: &corev1.EnvVarSource{}}}},
			{Name: "sidecar", Image: "busybox"},
		}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "web", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}}},
		}},
	}
}

func logsFor(t *testing.T, query string, alive func() bool) (string, error) {
	t.Helper()
	q, err := url.ParseQuery(query)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := parseLogOptions(q, started.Add(time.Hour))
	if err != nil {
		return "", err
	}
	pod := testPod("n1")
	var buf bytes.Buffer
	n := 0
	now := func() time.Time { n++; return started.Add(time.Hour + time.Duration(n)*time.Second) }
	if alive == nil {
		alive = func() bool { return true }
	}
	err = writeLogs(context.Background(), newLogWriter(&buf, opts, nil), pod, &pod.Spec.Containers[0], "n1",
		time.Millisecond, now, alive)
	return buf.String(), err
}

// TestFakeLogs covers the /containerLogs options on the fake lines.
func TestFakeLogs(t *testing.T) {
	all, err := logsFor(t, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "fake log line 1 of pod default/web-0 container web: started, image nginx:1.27, node n1\n" +
		"fake log line 2 of pod default/web-0 container web: testenv's fake kubelet runs no containers, it writes these lines\n" +
		"fake log line 3 of pod default/web-0 container web: ready\n"
	if all != want {
		t.Fatalf("logs:\n%s\nwant:\n%s", all, want)
	}
	lines := strings.SplitAfter(all, "\n")

	if got, _ := logsFor(t, "tailLines=1", nil); got != lines[2] {
		t.Errorf("tailLines=1: %q", got)
	}
	if got, _ := logsFor(t, "tail=2", nil); got != lines[1]+lines[2] {
		t.Errorf("tail=2: %q", got)
	}
	if got, _ := logsFor(t, "tailLines=0", nil); got != "" {
		t.Errorf("tailLines=0: %q", got)
	}
	if got, _ := logsFor(t, "tailLines=10", nil); got != all {
		t.Errorf("tailLines=10: %q", got)
	}
	if got, err := logsFor(t, "limitBytes=10", nil); got != all[:10] || !errors.Is(err, errLimitReached) {
		t.Errorf("limitBytes=10: %q %v", got, err)
	}
	got, _ := logsFor(t, "timestamps=true&tailLines=2", nil)
	wantTS := "2026-11-30T10:00:00.001000000Z " + lines[1] + "2026-11-30T10:00:00.002000000Z " + lines[2]
	if got != wantTS {
		t.Errorf("timestamps:\n%q\nwant\n%q", got, wantTS)
	}
	if got, _ := logsFor(t, "sinceTime=2026-11-30T10:00:00Z", nil); got != all {
		t.Errorf("sinceTime at the start: %q", got)
	}
	if got, _ := logsFor(t, "sinceSeconds=60", nil); got != "" {
		t.Errorf("sinceSeconds=60 (an hour after the start): %q", got)
	}
	if got, _ := logsFor(t, "stream=Stderr", nil); got != "" {
		t.Errorf("stream=Stderr: %q", got)
	}
	if got, _ := logsFor(t, "stream=Stdout", nil); got != all {
		t.Errorf("stream=Stdout: %q", got)
	}

	// follow: new lines until the container is gone.
	var ticks atomic.Int32
	got, err = logsFor(t, "follow=true&tailLines=1&timestamps=1", func() bool { return ticks.Add(1) <= 2 })
	if err != nil {
		t.Fatal(err)
	}
	wantFollow := "2026-11-30T10:00:00.002000000Z " + lines[2] +
		"2026-11-30T11:00:01.000000000Z fake log line 4 of pod default/web-0 container web: still running\n" +
		"2026-11-30T11:00:02.000000000Z fake log line 5 of pod default/web-0 container web: still running\n"
	if got != wantFollow {
		t.Errorf("follow:\n%q\nwant\n%q", got, wantFollow)
	}
	// follow with limitBytes stops at the limit.
	got, err = logsFor(t, "follow=true&limitBytes=300", nil)
	if len(got) != 300 || !errors.Is(err, errLimitReached) {
		t.Errorf("follow&limitBytes=300: %d bytes, %v", len(got), err)
	}

	for _, bad := range []string{"follow=maybe", "tailLines=-1", "limitBytes=0", "sinceSeconds=0",
		"sinceTime=yesterday", "sinceSeconds=5&sinceTime=2026-11-30T10:00:00Z", "stream=Both"} {
		if _, err := logsFor(t, bad, nil); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
