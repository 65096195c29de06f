package member

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flotilla/flotilla/testenv/internal/proc"
)

// Phases a member goes through, as recorded in state.json.
const (
	PhaseStarting = "starting"
	PhaseReady    = "ready"
	PhaseStopping = "stopping"
	PhaseStopped  = "stopped"
	PhaseFailed   = "failed"
)

// Component names, also the names of the log files.
const (
	Etcd              = "etcd"
	APIServer         = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
	Scheduler         = "kube-scheduler"
	Kubelet           = "kubelet"
)

// State is DIR/<member>/state.json, rewritten by the supervisor at every transition.
type State struct {
	Phase      string              `json:"phase"`
	Message    string              `json:"message,omitempty"`
	Supervisor proc.Ref            `json:"supervisor"`
	Components map[string]proc.Ref `json:"components"`
	StartedAt  time.Time           `json:"startedAt"`
	ReadyAt    *time.Time          `json:"readyAt,omitempty"`
	// Steps records how long each start-up step took, in order.
	Steps []Step `json:"steps"`
}

// Step is one timed start-up step.
type Step struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
}

// ReadState reads state.json ("" phase if absent).
func ReadState(c *Config) (State, error) {
	var s State
	b, err := os.ReadFile(c.StateFile())
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, err
	}
	err = json.Unmarshal(b, &s)
	return s, err
}

// Running reports whether the member's supervisor process is alive.
func (s State) Running() bool { return s.Supervisor.Alive() }

// Startup identifies the process that is starting the member (`testenv up` or `start`).
// Until that process writes Token into the release file, its death tears the member down.
type Startup struct {
	Ref   proc.Ref
	Token string
}

type supervisor struct {
	cfg     *Config
	state   State
	spawner *proc.Spawner
	exits   chan childExit
	cmds    map[string]*exec.Cmd
	order   []string
	logf    func(format string, args ...any)
}

type childExit struct {
	name string
	err  error
}

// Supervise runs the member in the foreground of this process until it is signalled, a
// watchdog fires, or a component dies. It returns the process exit code.
func Supervise(cfg *Config, startup Startup) int {
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s supervisor[%s]: %s\n", time.Now().Format("15:04:05.000"), cfg.Name, fmt.Sprintf(format, args...))
	}
	self, err := proc.RefOf(os.Getpid())
	if err != nil {
		logf("cannot read own identity: %v", err)
		return 1
	}
	s := &supervisor{
		cfg:     cfg,
		spawner: proc.NewSpawner(),
		exits:   make(chan childExit, 8),
		cmds:    map[string]*exec.Cmd{},
		logf:    logf,
		state: State{Phase: PhaseStarting, Supervisor: self, Components: map[string]proc.Ref{},
			StartedAt: time.Now()},
	}
	s.save()

	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		sig := <-sigs
		cancel(fmt.Errorf("received %v", sig))
	}()
	go s.watchdog(ctx, cancel, startup)

	failure := s.start(ctx)
	if failure != nil && context.Cause(ctx) != nil && isShutdownRequest(context.Cause(ctx)) {
		failure = nil // asked to stop while starting: a stop, not a failure
	}
	if failure == nil && ctx.Err() == nil {
		now := time.Now()
		s.state.Phase, s.state.ReadyAt = PhaseReady, &now
		s.save()
		logf("ready after %.1fs", now.Sub(s.state.StartedAt).Seconds())
		select {
		case <-ctx.Done():
		case ex := <-s.exits:
			failure = fmt.Errorf("%s exited unexpectedly: %v (see %s/%s.log)", ex.name, ex.err, cfg.LogDir(), ex.name)
		}
	}
	if failure == nil {
		if cause := context.Cause(ctx); cause != nil && !isShutdownRequest(cause) {
			failure = cause
		}
	}

	s.state.Phase = PhaseStopping
	if failure != nil {
		s.state.Message = failure.Error()
		logf("tearing down: %v", failure)
	} else {
		logf("stopping: %v", context.Cause(ctx))
	}
	s.save()
	s.teardown()
	if failure != nil {
		s.state.Phase = PhaseFailed
		s.save()
		return 1
	}
	s.state.Phase = PhaseStopped
	s.save()
	logf("stopped")
	return 0
}

// isShutdownRequest tells a requested stop (a signal) from a failure.
func isShutdownRequest(err error) bool { return strings.HasPrefix(err.Error(), "received ") }

// watchdog tears the member down when the process starting it dies before releasing it,
// when the configured parent dies, or when the lease file goes stale.
func (s *supervisor) watchdog(ctx context.Context, cancel context.CancelCauseFunc, startup Startup) {
	released := startup.Ref.PID == 0
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !released {
			if b, err := os.ReadFile(s.cfg.ReleaseFile()); err == nil && strings.TrimSpace(string(b)) == startup.Token {
				released = true
			} else if !startup.Ref.Alive() {
				cancel(fmt.Errorf("watchdog: the process starting this member (pid %d) died before the member was ready", startup.Ref.PID))
				return
			}
		}
		if p := s.cfg.Parent; p != nil && !p.Alive() {
			cancel(fmt.Errorf("watchdog: parent process %d is gone", p.PID))
			return
		}
		// The lease counts from the release: start-up is guarded by the startup watchdog,
		// and `up`/`start` touch the lease when they release the member.
		if released && s.cfg.LeaseTimeout.Duration > 0 {
			fi, err := os.Stat(s.cfg.LeaseFile())
			if err != nil || time.Since(fi.ModTime()) > s.cfg.LeaseTimeout.Duration {
				cancel(fmt.Errorf("watchdog: lease file %s not touched for %v", s.cfg.LeaseFile(), s.cfg.LeaseTimeout.Duration))
				return
			}
		}
	}
}

// start brings the components up in order, each gated on its readiness.
func (s *supervisor) start(ctx context.Context) error {
	c := s.cfg
	deadline := time.Now().Add(c.ReadyTimeout.Duration)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()

	httpc, err := s.adminHTTPClient()
	if err != nil {
		return err
	}
	if err := s.step(ctx, "etcd", func() error {
		if err := s.spawn(Etcd, c.Binaries.Etcd, c.EtcdArgs()); err != nil {
			return err
		}
		return s.waitFor(ctx, Etcd, func() error { return probe(ctx, http.DefaultClient, c.EtcdURL()+"/health", `"health":"true"`) })
	}); err != nil {
		return err
	}
	if err := s.step(ctx, "kube-apiserver", func() error {
		if err := s.spawn(APIServer, c.Binaries.APIServer, c.APIServerArgs()); err != nil {
			return err
		}
		return s.waitFor(ctx, APIServer, func() error { return probe(ctx, httpc, c.Server()+"/readyz", "ok") })
	}); err != nil {
		return err
	}
	cs, err := s.adminClientset()
	if err != nil {
		return err
	}
	if err := s.step(ctx, "default-namespace", func() error {
		return s.waitFor(ctx, APIServer, func() error {
			_, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
			return err
		})
	}); err != nil {
		return err
	}
	if c.Karmada != nil {
		return s.startKarmada(ctx)
	}
	if !c.WithWorkloads {
		return nil
	}
	compHTTP, err := s.componentHTTPClient()
	if err != nil {
		return err
	}
	if err := s.step(ctx, "workloads", func() error {
		if err := s.spawn(ControllerManager, c.Binaries.ControllerManager, c.ControllerManagerArgs()); err != nil {
			return err
		}
		// Without fake nodes there is nothing to schedule onto or run: kube-controller-manager
		// runs alone (the conformance recorder's member, whose pods must stay as created).
		nodes := c.Nodes.Count > 0
		if nodes {
			if err := s.spawn(Scheduler, c.Binaries.Scheduler, c.SchedulerArgs()); err != nil {
				return err
			}
			if err := s.spawn(Kubelet, c.Binaries.Testenv, c.KubeletArgs()); err != nil {
				return err
			}
		}
		if err := s.waitFor(ctx, ControllerManager, func() error {
			return probe(ctx, compHTTP, "https://127.0.0.1:"+strconv.Itoa(c.Ports.ControllerManager)+"/healthz", "ok")
		}); err != nil {
			return err
		}
		if nodes {
			if err := s.waitFor(ctx, Scheduler, func() error {
				return probe(ctx, compHTTP, "https://127.0.0.1:"+strconv.Itoa(c.Ports.Scheduler)+"/healthz", "ok")
			}); err != nil {
				return err
			}
		}
		// The serviceaccount controller has run once the default ServiceAccount exists (when
		// --controllers leaves it out, the healthz probe above is all there is to wait for).
		if slices.Contains(c.Controllers, "serviceaccount") {
			if err := s.waitFor(ctx, ControllerManager, func() error {
				_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
				return err
			}); err != nil {
				return err
			}
		}
		if !nodes {
			return nil
		}
		return s.waitFor(ctx, Kubelet, func() error { return nodesReady(ctx, cs, c.NodeNames()) })
	}); err != nil {
		return err
	}
	return nil
}

func (s *supervisor) step(ctx context.Context, name string, f func() error) error {
	t0 := time.Now()
	err := f()
	if err != nil {
		if ctx.Err() != nil && context.Cause(ctx) != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("%s: not ready within --ready-timeout %v: %w", name, s.cfg.ReadyTimeout.Duration, err)
			}
			return fmt.Errorf("%s: %w", name, context.Cause(ctx))
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	s.state.Steps = append(s.state.Steps, Step{Name: name, Seconds: roundSeconds(time.Since(t0))})
	s.save()
	s.logf("%s ready in %.2fs", name, time.Since(t0).Seconds())
	return nil
}

// waitFor polls check until it succeeds, the context ends, or any component exits.
func (s *supervisor) waitFor(ctx context.Context, component string, check func() error) error {
	var last error
	for {
		if last = check(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %v (see %s/%s.log)", component, last, s.cfg.LogDir(), component)
		case ex := <-s.exits:
			return fmt.Errorf("%s exited during start-up: %v; last lines of %s/%s.log:\n%s",
				ex.name, ex.err, s.cfg.LogDir(), ex.name, tail(s.cfg.LogDir()+"/"+ex.name+".log", 20))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// spawn starts one component in the supervisor's process group, with its output appended
// to logs/<name>.log and the member's tags in its environment.
func (s *supervisor) spawn(name, bin string, args []string) error {
	logFile, err := os.OpenFile(s.cfg.LogDir()+"/"+name+".log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logFile, "===== %s: testenv starting %s %s\n", time.Now().Format(time.RFC3339), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(proc.WithoutTags(os.Environ()), s.cfg.Tags()...)
	if err := s.spawner.Start(cmd); err != nil {
		logFile.Close()
		return fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	ref, err := proc.RefOf(cmd.Process.Pid)
	if err != nil {
		ref = proc.Ref{PID: cmd.Process.Pid}
	}
	s.cmds[name] = cmd
	s.order = append(s.order, name)
	s.state.Components[name] = ref
	s.save()
	go func() {
		err := cmd.Wait()
		logFile.Close()
		if err == nil {
			err = errors.New("exit status 0")
		}
		s.exits <- childExit{name: name, err: err}
	}()
	return nil
}

// teardown stops the components in reverse start order: SIGTERM, a grace period, SIGKILL.
func (s *supervisor) teardown() {
	grace := map[string]time.Duration{APIServer: 30 * time.Second, Etcd: 15 * time.Second}
	for i := len(s.order) - 1; i >= 0; i-- {
		name := s.order[i]
		ref := s.state.Components[name]
		if !ref.Alive() {
			continue
		}
		_ = ref.Signal(syscall.SIGTERM)
		g := grace[name]
		if g == 0 {
			g = 10 * time.Second
		}
		if !proc.WaitGone(g, ref) {
			s.logf("%s did not stop within %v; killing it", name, g)
			_ = ref.Signal(syscall.SIGKILL)
			proc.WaitGone(5*time.Second, ref)
		}
	}
}

func (s *supervisor) save() {
	b, err := json.MarshalIndent(s.state, "", "  ")
	if err == nil {
		err = writeFileAtomic(s.cfg.StateFile(), append(b, '\n'))
	}
	if err != nil {
		s.logf("cannot write %s: %v", s.cfg.StateFile(), err)
	}
}

func (s *supervisor) adminHTTPClient() (*http.Client, error) { return AdminHTTPClient(s.cfg) }

// AdminHTTPClient is an HTTP client that trusts the member's CA and presents the admin
// client certificate.
func AdminHTTPClient(c *Config) (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(c.pki("admin.crt"), c.pki("admin.key"))
	if err != nil {
		return nil, err
	}
	pool, err := caPool(c.CAFile())
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}},
	}}, nil
}

func (s *supervisor) componentHTTPClient() (*http.Client, error) {
	pool, err := caPool(s.cfg.CAFile())
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool},
	}}, nil
}

func (s *supervisor) adminClientset() (*kubernetes.Clientset, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", s.cfg.AdminKubeconfig())
	if err != nil {
		return nil, err
	}
	rc.Timeout = 10 * time.Second
	return kubernetes.NewForConfig(rc)
}

func caPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("no certificates in %s", file)
	}
	return pool, nil
}

// probe GETs url and wants a 200 whose body contains want.
func probe(ctx context.Context, c *http.Client, url, want string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

// nodesReady wants every named node to exist, be Ready and carry no not-ready taint.
func nodesReady(ctx context.Context, cs kubernetes.Interface, names []string) error {
	for _, n := range names {
		node, err := cs.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("node %s not registered yet", n)
		}
		if err != nil {
			return err
		}
		ready := false
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				ready = true
			}
		}
		if !ready {
			return fmt.Errorf("node %s not Ready", n)
		}
		for _, t := range node.Spec.Taints {
			if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
				return fmt.Errorf("node %s still tainted %s", n, t.Key)
			}
		}
	}
	return nil
}

func roundSeconds(d time.Duration) float64 { return float64(d.Milliseconds()) / 1000 }

// tail returns the last n lines of a file (for error messages).
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}

// Tail is tail for other packages (failure reports).
func Tail(path string, n int) string { return tail(path, n) }
