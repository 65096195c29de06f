package kubelet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// rfc3339NanoFixed is the timestamp format of the kubelet's `timestamps=true` log lines
// (k8s.io/cri-client/pkg/logs: fixed-width RFC3339Nano).
const rfc3339NanoFixed = "2006-01-02T15:04:05.000000000Z07:00"

// staticLogLines is how many lines a container has logged when it is first asked for logs.
const staticLogLines = 3

// logOptions are the query parameters kube-apiserver passes to /containerLogs.
type logOptions struct {
	follow     bool
	previous   bool
	timestamps bool
	since      time.Time // zero: no limit
	tailLines  *int64
	limitBytes *int64
	stream     string // All (default), Stdout or Stderr
}

// parseLogOptions reads the /containerLogs query as the kubelet does (v1.PodLogOptions,
// plus the legacy `tail`).
func parseLogOptions(q url.Values, now time.Time) (logOptions, error) {
	var o logOptions
	boolean := func(name string) (bool, error) {
		v := q.Get(name)
		if v == "" {
			return false, nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, fmt.Errorf("%s=%q: not a boolean", name, v)
		}
		return b, nil
	}
	integer := func(name string, min int64) (*int64, error) {
		v := q.Get(name)
		if v == "" {
			return nil, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < min {
			return nil, fmt.Errorf("%s=%q: want an integer >= %d", name, v, min)
		}
		return &n, nil
	}
	var err error
	if o.follow, err = boolean("follow"); err != nil {
		return o, err
	}
	if o.previous, err = boolean("previous"); err != nil {
		return o, err
	}
	if o.timestamps, err = boolean("timestamps"); err != nil {
		return o, err
	}
	if t := q.Get("tail"); t != "" && q.Get("tailLines") == "" && t != "all" {
		q = cloneValues(q)
		q.Set("tailLines", t)
	}
	if o.tailLines, err = integer("tailLines", 0); err != nil {
		return o, err
	}
	if o.limitBytes, err = integer("limitBytes", 1); err != nil {
		return o, err
	}
	secs, err := integer("sinceSeconds", 1)
	if err != nil {
		return o, err
	}
	if st := q.Get("sinceTime"); st != "" {
		if secs != nil {
			return o, errors.New("at most one of sinceTime or sinceSeconds may be specified")
		}
		t, err := time.Parse(time.RFC3339, st)
		if err != nil {
			return o, fmt.Errorf("sinceTime=%q: not an RFC3339 time", st)
		}
		o.since = t
	} else if secs != nil {
		o.since = now.Add(-time.Duration(*secs) * time.Second)
	}
	switch o.stream = q.Get("stream"); o.stream {
	case "":
		o.stream = string(corev1.LogStreamAll)
	case string(corev1.LogStreamAll), string(corev1.LogStreamStdout), string(corev1.LogStreamStderr):
	default:
		return o, fmt.Errorf("invalid stream type %q", o.stream)
	}
	return o, nil
}

func cloneValues(q url.Values) url.Values {
	c := url.Values{}
	for k, v := range q {
		c[k] = append([]string(nil), v...)
	}
	return c
}

// A logLine is one line a fake container "wrote" (without the newline).
type logLine struct {
	at   time.Time
	text string
}

// fakeLogLine is line n (1-based) of a fake container's log: deterministic text naming the
// pod, the container and its image. Lines 1..staticLogLines were written when the
// container started; later lines appear once a second while a follow stream is open.
func fakeLogLine(pod *corev1.Pod, c *corev1.Container, node string, n int) string {
	who := fmt.Sprintf("fake log line %d of pod %s/%s container %s", n, pod.Namespace, pod.Name, c.Name)
	switch n {
	case 1:
		return fmt.Sprintf("%s: started, image %s, node %s", who, c.Image, node)
	case 2:
		return who + ": testenv's fake kubelet runs no containers, it writes these lines"
	case 3:
		return who + ": ready"
	}
	return who + ": still running"
}

// containerStarted is when the container "started" (its running state, else the pod's
// start or creation time): the timestamp of its first lines.
func containerStarted(pod *corev1.Pod, name string) time.Time {
	for _, st := range append(append([]corev1.ContainerStatus(nil), pod.Status.ContainerStatuses...), pod.Status.InitContainerStatuses...) {
		if st.Name != name {
			continue
		}
		switch {
		case st.State.Running != nil:
			return st.State.Running.StartedAt.Time
		case st.State.Terminated != nil:
			return st.State.Terminated.StartedAt.Time
		}
	}
	if pod.Status.StartTime != nil {
		return pod.Status.StartTime.Time
	}
	return pod.CreationTimestamp.Time
}

// staticLines are the lines a container has written since it started.
func staticLines(pod *corev1.Pod, c *corev1.Container, node string) []logLine {
	start := containerStarted(pod, c.Name)
	lines := make([]logLine, staticLogLines)
	for i := range lines {
		lines[i] = logLine{at: start.Add(time.Duration(i) * time.Millisecond), text: fakeLogLine(pod, c, node, i+1)}
	}
	return lines
}

// errLimitReached ends a log stream once limitBytes have been written.
var errLimitReached = errors.New("limitBytes reached")

// logWriter writes log lines the way the kubelet does: optional timestamp prefix, lines
// before `since` dropped, output cut (even mid-line) at limitBytes.
type logWriter struct {
	w     io.Writer
	opts  logOptions
	left  int64 // bytes left when opts.limitBytes is set
	flush func()
}

func newLogWriter(w io.Writer, opts logOptions, flush func()) *logWriter {
	lw := &logWriter{w: w, opts: opts, flush: flush}
	if opts.limitBytes != nil {
		lw.left = *opts.limitBytes
	}
	return lw
}

func (lw *logWriter) write(l logLine) error {
	if !lw.opts.since.IsZero() && l.at.Before(lw.opts.since) {
		return nil
	}
	if lw.opts.stream == string(corev1.LogStreamStderr) {
		return nil // the fake containers write to stdout only
	}
	b := []byte(l.text + "\n")
	if lw.opts.timestamps {
		b = append([]byte(l.at.UTC().Format(rfc3339NanoFixed)+" "), b...)
	}
	limited := false
	if lw.opts.limitBytes != nil && int64(len(b)) >= lw.left {
		b, limited = b[:lw.left], true
	}
	lw.left -= int64(len(b))
	if _, err := lw.w.Write(b); err != nil {
		return err
	}
	if lw.flush != nil {
		lw.flush()
	}
	if limited {
		return errLimitReached
	}
	return nil
}

// writeLogs writes a fake container's log: the static lines (the last tailLines of them),
// then, with follow, a new line every `every` until ctx ends or alive reports that the
// container is gone (pod deleted, replaced or finished).
func writeLogs(ctx context.Context, lw *logWriter, pod *corev1.Pod, c *corev1.Container, node string,
	every time.Duration, now func() time.Time, alive func() bool) error {
	lines := staticLines(pod, c, node)
	if t := lw.opts.tailLines; t != nil && *t < int64(len(lines)) {
		lines = lines[int64(len(lines))-*t:]
	}
	for _, l := range lines {
		if err := lw.write(l); err != nil {
			return err
		}
	}
	if !lw.opts.follow {
		return nil
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for n := staticLogLines + 1; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if !alive() {
			return nil
		}
		if err := lw.write(logLine{at: now(), text: fakeLogLine(pod, c, node, n)}); err != nil {
			return err
		}
	}
}
