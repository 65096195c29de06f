package kubelet

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	translator "k8s.io/apiserver/pkg/util/proxy"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/klog/v2"
	"k8s.io/streaming/pkg/httpstream/wsstream"
	utilexec "k8s.io/utils/exec"
)

// ExtendWebSocketsToKubelet is the node-declared feature (status.declaredFeatures) that tells
// kube-apiserver (1.36+, feature gate on by default) to pass WebSocket exec/attach requests
// through to the kubelet instead of translating them to SPDY itself. A real 1.37 kubelet
// declares it, and so do the fake nodes: the fake kubelet translates such requests to its
// own SPDY endpoint, as the real kubelet does towards the CRI streaming server.
const ExtendWebSocketsToKubelet = "ExtendWebSocketsToKubelet"

const (
	// streamIdleTimeout is the kubelet's default --streaming-connection-idle-timeout.
	streamIdleTimeout = 4 * time.Hour
	// logFollowEvery is how often a followed fake container writes a line.
	logFollowEvery = time.Second
	// podGonePoll is how often a long exec or log stream checks that its pod still exists.
	podGonePoll = time.Second
)

// podSource finds pods; the informer's lister in the kubelet, a fake one in tests.
type podSource interface {
	Pods(namespace string) corelisters.PodNamespaceLister
}

// nodeServer is the kubelet API of one fake node: an HTTPS listener on the node's address
// (port chosen by the kernel) serving /containerLogs and /exec for the pods bound to it.
// Callers are not authenticated (kube-apiserver's client certificate is not asked for).
type nodeServer struct {
	node string
	pods podSource
	ln   net.Listener
	srv  *http.Server
	// self reaches this server over TLS: the WebSocket→SPDY translator dials it.
	self      url.URL
	selfTrans *http.Transport
	logf      func(string, ...any)
	active    atomic.Int32 // exec commands running
}

// newNodeServer listens on host:0 with cert; Serve starts answering.
func newNodeServer(node, host string, cert tls.Certificate, roots *x509.CertPool, logf func(string, ...any)) (*nodeServer, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("kubelet API listener of %s: %w", node, err)
	}
	s := &nodeServer{
		node: node, ln: ln, logf: logf,
		self: url.URL{Scheme: "https", Host: ln.Addr().String()},
		selfTrans: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12},
		},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{ns}/{pod}/{container}", s.containerLogs)
	for _, p := range []string{"/exec/{ns}/{pod}/{container}", "/exec/{ns}/{pod}/{uid}/{container}"} {
		mux.HandleFunc("GET "+p, s.exec)
		mux.HandleFunc("POST "+p, s.exec)
	}
	for _, p := range []string{"/portForward/{ns}/{pod}", "/portForward/{ns}/{pod}/{uid}"} {
		mux.HandleFunc("GET "+p, s.portForward)
		mux.HandleFunc("POST "+p, s.portForward)
	}
	for _, p := range []string{"/attach/", "/run/"} {
		what := strings.Trim(p, "/")
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			writeStatus(w, http.StatusNotImplemented,
				fmt.Sprintf("testenv fake kubelet: %s is not supported (the fake node %s serves only container logs, exec and port-forward)", what, node))
		})
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, fmt.Sprintf("testenv fake kubelet: %s %s is not served (only /containerLogs, /exec and /portForward)", r.Method, r.URL.Path),
			http.StatusNotFound)
	})
	s.srv = &http.Server{
		Handler:           mux,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}},
		ReadHeaderTimeout: 30 * time.Second,
	}
	return s, nil
}

// Port is the TCP port the node's kubelet API listens on.
func (s *nodeServer) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// Serve answers requests until ctx ends (pods must be set).
func (s *nodeServer) Serve(ctx context.Context) error {
	s.srv.BaseContext = func(net.Listener) context.Context { return ctx }
	stop := context.AfterFunc(ctx, func() { s.srv.Close() })
	defer stop()
	err := s.srv.ServeTLS(s.ln, "", "")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close closes the listener of a server that is not serving yet.
func (s *nodeServer) Close() { s.ln.Close(); s.selfTrans.CloseIdleConnections() }

// pod returns the pod if it exists and is bound to this node (the kubelet knows no other).
func (s *nodeServer) pod(ns, name string) (*corev1.Pod, bool) {
	pod, err := s.pods.Pods(ns).Get(name)
	if err != nil || pod.Spec.NodeName != s.node {
		return nil, false
	}
	return pod, true
}

// alive reports whether the pod (same UID) is still there and running on this node.
func (s *nodeServer) alive(pod *corev1.Pod) bool {
	p, ok := s.pod(pod.Namespace, pod.Name)
	return ok && p.UID == pod.UID && p.DeletionTimestamp == nil &&
		p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

func findContainer(pod *corev1.Pod, name string) *corev1.Container {
	for _, list := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if c := &pod.Spec.EphemeralContainers[i]; c.Name == name {
			return (*corev1.Container)(&c.EphemeralContainerCommon)
		}
	}
	return nil
}

// containerLogs serves GET /containerLogs/{ns}/{pod}/{container} like the kubelet: plain-text
// errors (kube-apiserver turns them into its own error with that message), chunked output.
func (s *nodeServer) containerLogs(w http.ResponseWriter, r *http.Request) {
	ns, name, cname := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("container")
	opts, err := parseLogOptions(r.URL.Query(), time.Now())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	pod, ok := s.pod(ns, name)
	if !ok {
		http.Error(w, fmt.Sprintf("pod %q does not exist", name), http.StatusNotFound)
		return
	}
	c := findContainer(pod, cname)
	if c == nil {
		http.Error(w, fmt.Sprintf("container %q not found in pod %q", cname, name), http.StatusNotFound)
		return
	}
	if opts.previous {
		// Fake containers never restart, so there is no previous one (the kubelet's words).
		http.Error(w, fmt.Sprintf("previous terminated container %q in pod %q not found", cname, name), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	lw := newLogWriter(w, opts, func() {
		if flusher != nil {
			flusher.Flush()
		}
	})
	err = writeLogs(r.Context(), lw, pod, c, s.node, logFollowEvery, time.Now, func() bool { return s.alive(pod) })
	if err != nil && !errors.Is(err, errLimitReached) && r.Context().Err() == nil {
		s.logf("logs of %s/%s/%s: %v", ns, name, cname, err)
	}
}

// exec serves /exec/{ns}/{pod}[/{uid}]/{container}?command=…&input=…&output=…&error=…&tty=…
// with the kubelet's streaming server code (SPDY v1–v4, WebSocket up to v4.channel.k8s.io).
// WebSocket v5 requests (kube-apiserver passes them through because the node declares
// ExtendWebSocketsToKubelet) are translated to SPDY against this same server, as the real
// kubelet does towards its CRI streaming server.
func (s *nodeServer) exec(w http.ResponseWriter, r *http.Request) {
	ns, name, uid, cname := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("uid"), r.PathValue("container")
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		writeStatus(w, http.StatusBadRequest, err.Error())
		return
	}
	pod, ok := s.pod(ns, name)
	if !ok || (uid != "" && string(pod.UID) != uid) {
		writeStatus(w, http.StatusNotFound, "pod does not exist")
		return
	}
	c := findContainer(pod, cname)
	if c == nil {
		writeStatus(w, http.StatusNotFound, fmt.Sprintf("container not found (%q)", cname))
		return
	}
	// The session ends when the client goes away (the hijacked connection is closed or
	// fails), the pod is deleted, or the kubelet stops (the server's base context).
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	ctx = klog.NewContext(ctx, logr.New(quietSink{klog.Background().GetSink()}))
	go func() {
		t := time.NewTicker(podGonePoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if !s.alive(pod) {
					cancel()
					return
				}
			}
		}
	}()
	r = r.WithContext(ctx)
	w = &hijackWatcher{ResponseWriter: w, gone: cancel}

	if wsstream.IsWebSocketRequestWithStreamCloseProtocol(r) {
		loc := s.self
		loc.Path, loc.RawQuery = r.URL.Path, r.URL.RawQuery
		translator.NewStreamTranslatorHandler(&loc, s.selfTrans, 0, translator.Options{
			Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr, Tty: opts.TTY,
		}).ServeHTTP(w, r)
		return
	}
	ex := &executor{pod: pod, container: c, active: &s.active}
	remotecommand.ServeExec(w, r, ex, name, string(pod.UID), cname, r.URL.Query()["command"], opts,
		streamIdleTimeout, remotecommand.DefaultStreamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

// portForward serves port-forward for a pod bound to this node with the kubelet's streaming
// server code (SPDY, and WebSocket with the ports in the query). Pod IPs are data only, so a
// forwarded stream is connected only for a pod whose server a test runs (its address named by
// the annotation testenv.flotilla.io/pod-ip); any other pod's stream gets an error.
func (s *nodeServer) portForward(w http.ResponseWriter, r *http.Request) {
	ns, name, uid := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("uid")
	pod, ok := s.pod(ns, name)
	if !ok || (uid != "" && string(pod.UID) != uid) {
		writeStatus(w, http.StatusNotFound, "pod does not exist")
		return
	}
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		writeStatus(w, http.StatusBadRequest, err.Error())
		return
	}
	portforward.ServePortForward(w, r, &forwarder{pod: pod}, name, string(pod.UID), opts,
		streamIdleTimeout, remotecommand.DefaultStreamCreationTimeout, portforward.SupportedProtocols)
}

// forwarder connects a forwarded stream to the test's server for the pod.
type forwarder struct {
	pod *corev1.Pod
}

func (f *forwarder) PortForward(ctx context.Context, name, uid string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	ip := net.ParseIP(f.pod.Annotations[PodIPAnnotation])
	if ip == nil {
		return fmt.Errorf("pod %s runs nothing: testenv's fake kubelet forwards only to a pod whose server a test runs (annotation %s)", name, PodIPAnnotation)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(ip.String(), strconv.Itoa(int(port))))
	if err != nil {
		return fmt.Errorf("pod %s port %d: %w", name, port, err)
	}
	defer conn.Close()
	go func() {
		_, _ = io.Copy(conn, stream)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	// Done when the pod's side is: it has answered and closed.
	_, err = io.Copy(stream, conn)
	return err
}

// executor runs exec commands in the built-in shell-like responder (see shell).
type executor struct {
	pod       *corev1.Pod
	container *corev1.Container
	active    *atomic.Int32
}

func (e *executor) ExecInContainer(ctx context.Context, name, uid, container string, cmd []string,
	in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, timeout time.Duration) error {
	e.active.Add(1)
	defer e.active.Add(-1)
	if resize != nil {
		go func() {
			for range resize { // window size changes mean nothing here
			}
		}()
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var stdout, stderr io.Writer
	if out != nil {
		stdout = out
	}
	if errOut != nil {
		stderr = errOut
	}
	if tty && stdout != nil {
		// A terminal has one output stream and turns \n into \r\n.
		stdout = &crlfWriter{w: stdout}
		stderr = stdout
	}
	var env []envVar
	for _, e := range e.container.Env {
		if e.ValueFrom == nil {
			env = append(env, envVar{e.Name, e.Value})
		}
	}
	if in != nil {
		// A command blocked reading stdin (cat, sh) ends with the session too.
		stop := context.AfterFunc(ctx, func() {
			if r, ok := in.(interface{ Reset() error }); ok {
				r.Reset()
			} else if c, ok := in.(io.Closer); ok {
				c.Close()
			}
		})
		defer stop()
	}
	code := newShell(ctx, e.pod.Name, env, in, stdout, stderr).Run(cmd)
	// Closing stdout/stderr ends the client's copies before the exit status arrives.
	for _, c := range []io.Closer{out, errOut} {
		if c != nil {
			c.Close()
		}
	}
	if code != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", code), Code: code}
	}
	return nil
}

type crlfWriter struct{ w io.Writer }

func (c *crlfWriter) Write(p []byte) (int, error) {
	if _, err := c.w.Write([]byte(strings.ReplaceAll(string(p), "\n", "\r\n"))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// hijackWatcher calls gone when the connection hijacked for a SPDY/WebSocket session is
// closed or fails to read (the client went away): after a hijack, net/http no longer
// cancels the request's context. It deliberately has no Unwrap method, so that the
// streaming code hijacks through it.
type hijackWatcher struct {
	http.ResponseWriter
	gone func()
}

func (h *hijackWatcher) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	wc := &watchedConn{Conn: conn, gone: h.gone}
	// Reads through the buffered reader must reach the watched connection too.
	rw = bufio.NewReadWriter(bufio.NewReaderSize(io.MultiReader(io.LimitReader(rw.Reader, int64(rw.Reader.Buffered())), wc), 4096), rw.Writer)
	return wc, rw, nil
}

func (h *hijackWatcher) Flush() {
	if f, ok := h.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

type watchedConn struct {
	net.Conn
	gone func()
	once sync.Once
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.once.Do(c.gone)
	}
	return n, err
}

func (c *watchedConn) Close() error {
	c.once.Do(c.gone)
	return c.Conn.Close()
}

// servingCert makes a self-signed ECDSA serving certificate for the fake nodes' kubelet
// API (kube-apiserver does not verify kubelet certificates without
// --kubelet-certificate-authority). It returns a pool trusting it, for the translator.
func servingCert(ip string, nodes []string) (tls.Certificate, *x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "testenv-fake-kubelet"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              append([]string{"localhost"}, nodes...),
	}
	for _, a := range []string{ip, "127.0.0.1"} {
		if parsed := net.ParseIP(a); parsed != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, parsed)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool, nil
}

// writeStatus answers a streaming request (exec, attach, port-forward) that cannot be
// upgraded with a metav1.Status. kube-apiserver relays an upgrade request's error
// response as it is, and clients decode a Status from it; a plain-text "a: b" message would
// decode (as YAML) into an empty Status, which kubectl prints as "Error from server: ".
func writeStatus(w http.ResponseWriter, code int, msg string) {
	reason := metav1.StatusReason("")
	switch code {
	case http.StatusBadRequest:
		reason = metav1.StatusReasonBadRequest
	case http.StatusNotFound:
		reason = metav1.StatusReasonNotFound
	}
	b, _ := json.Marshal(metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg,
	})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	w.Write(b)
}

// quietSink drops the "use of closed network connection" errors that the WebSocket code
// (wsstream) logs at the normal end of every WebSocket exec session.
type quietSink struct{ logr.LogSink }

func (q quietSink) Error(err error, msg string, kv ...any) {
	if errors.Is(err, net.ErrClosed) {
		return
	}
	q.LogSink.Error(err, msg, kv...)
}

func (q quietSink) WithValues(kv ...any) logr.LogSink { return quietSink{q.LogSink.WithValues(kv...)} }
func (q quietSink) WithName(name string) logr.LogSink { return quietSink{q.LogSink.WithName(name)} }
