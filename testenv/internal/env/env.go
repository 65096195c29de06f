// Package env operates a whole test environment in one directory: `up` (prepare and start
// members in parallel, wait until all are ready, write ready.json), `start`/`stop`/`kill`
// of one member, `down`, and `status`.
//
// Members are run by detached supervisor processes (package member); this package only
// spawns, signals and observes them through the files in DIR, so every command is a short
// process and the environment outlives it.
package env

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/flotilla/flotilla/testenv/internal/member"
	"github.com/flotilla/flotilla/testenv/internal/proc"
)

// ReadyFile is the name of the file `up` writes when every member is ready.
const ReadyFile = "ready.json"

// Ready is the content of DIR/ready.json.
type Ready struct {
	Version           int          `json:"version"`
	Dir               string       `json:"dir"`
	KubernetesVersion string       `json:"kubernetesVersion"`
	Kubeconfig        string       `json:"kubeconfig"` // all members as contexts
	Members           []MemberInfo `json:"members"`
}

// MemberInfo describes one member in ready.json.
type MemberInfo struct {
	Name           string         `json:"name"`
	Server         string         `json:"server"`
	Kubeconfig     string         `json:"kubeconfig"`
	Context        string         `json:"context"`
	CA             string         `json:"ca"`
	EtcdURL        string         `json:"etcd"`
	Ports          member.Ports   `json:"ports"`
	Running        bool           `json:"running"`
	Phase          string         `json:"phase"`
	Message        string         `json:"message,omitempty"` // why it failed, if it did
	PIDs           map[string]int `json:"pids"`
	LogDir         string         `json:"logDir"`
	DataDir        string         `json:"dataDir"`
	WithWorkloads  bool           `json:"withWorkloads"`
	Nodes          []string       `json:"nodes,omitempty"`
	Region         string         `json:"region,omitempty"`
	Zones          []string       `json:"zones,omitempty"`
	StartupSeconds float64        `json:"startupSeconds,omitempty"`
}

// envFile is DIR/testenv.json: the member names in order.
type envFile struct {
	Members []string `json:"members"`
	Created string   `json:"created"`
}

func absDir(dir string) (string, error) {
	if dir == "" {
		return "", errors.New("--out DIR is required")
	}
	return filepath.Abs(dir)
}

func readEnv(dir string) (envFile, error) {
	var e envFile
	b, err := os.ReadFile(filepath.Join(dir, "testenv.json"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return e, fmt.Errorf("%s holds no testenv environment (no testenv.json); run `testenv up --out %s` first", dir, dir)
		}
		return e, err
	}
	return e, json.Unmarshal(b, &e)
}

func loadMembers(dir string) ([]*member.Config, error) {
	e, err := readEnv(dir)
	if err != nil {
		return nil, err
	}
	var out []*member.Config
	for _, n := range e.Members {
		c, err := member.Load(dir, n)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func findMember(dir, name string) (*member.Config, error) {
	e, err := readEnv(dir)
	if err != nil {
		return nil, err
	}
	for _, n := range e.Members {
		if n == name {
			return member.Load(dir, n)
		}
	}
	return nil, fmt.Errorf("no member %q in %s (members: %s)", name, dir, strings.Join(e.Members, ", "))
}

// spawnSupervisor starts `testenv supervise` for the member in a new session (so it and its
// children form one process group that survives this command) and returns its identity
// and the release token.
func spawnSupervisor(c *member.Config) (proc.Ref, string, error) {
	self, err := proc.RefOf(os.Getpid())
	if err != nil {
		return proc.Ref{}, "", err
	}
	token := randomToken()
	_ = os.Remove(c.ReleaseFile())
	_ = os.Remove(c.StateFile())
	logFile, err := os.OpenFile(filepath.Join(c.LogDir(), "supervisor.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return proc.Ref{}, "", err
	}
	defer logFile.Close()
	cmd := exec.Command(c.Binaries.Testenv, "supervise",
		"--out", c.EnvDir, "--member", c.Name,
		"--startup-pid", strconv.Itoa(self.PID),
		"--startup-start-time", strconv.FormatUint(self.StartTime, 10),
		"--startup-token", token)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(proc.WithoutTags(os.Environ()), c.Tags()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return proc.Ref{}, "", fmt.Errorf("start supervisor of %s: %w", c.Name, err)
	}
	ref, err := proc.RefOf(cmd.Process.Pid)
	if err != nil {
		ref = proc.Ref{PID: cmd.Process.Pid}
	}
	// Reap it if it exits while we still run, so it does not linger as our zombie.
	go func() { _ = cmd.Wait() }()
	return ref, token, nil
}

// release hands the member over: from now on only --parent-pid and the lease keep it
// alive, so the lease is renewed first.
func release(c *member.Config, token string) error {
	if c.LeaseTimeout.Duration > 0 {
		now := time.Now()
		if err := os.Chtimes(c.LeaseFile(), now, now); err != nil {
			if err := os.WriteFile(c.LeaseFile(), nil, 0o644); err != nil {
				return err
			}
		}
	}
	return os.WriteFile(c.ReleaseFile(), []byte(token+"\n"), 0o644)
}

func randomToken() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// waitResult is how one member's start ended.
type waitResult struct {
	cfg     *member.Config
	state   member.State
	err     error
	elapsed time.Duration
}

// waitReady polls the member's state until ready, failed, or its supervisor disappears.
func waitReady(c *member.Config, sup proc.Ref, timeout time.Duration, progress func(string)) waitResult {
	t0 := time.Now()
	seen := 0
	for {
		st, _ := member.ReadState(c)
		for ; seen < len(st.Steps); seen++ {
			progress(fmt.Sprintf("%-10s %-18s ready in %5.1fs", c.Name, st.Steps[seen].Name, st.Steps[seen].Seconds))
		}
		switch {
		case st.Phase == member.PhaseReady && st.Supervisor.PID == sup.PID:
			return waitResult{cfg: c, state: st, elapsed: time.Since(t0)}
		case st.Phase == member.PhaseFailed || st.Phase == member.PhaseStopping || st.Phase == member.PhaseStopped:
			if st.Supervisor.PID == sup.PID {
				// Let the supervisor finish its teardown and record the outcome.
				proc.WaitGone(60*time.Second, sup)
				st, _ = member.ReadState(c)
				return waitResult{cfg: c, state: st, elapsed: time.Since(t0), err: fmt.Errorf("%s", st.Message)}
			}
		}
		if !sup.Alive() {
			st, _ = member.ReadState(c)
			msg := st.Message
			if msg == "" {
				msg = "supervisor exited"
			}
			return waitResult{cfg: c, state: st, elapsed: time.Since(t0),
				err: fmt.Errorf("%s; supervisor log:\n%s", msg, member.Tail(filepath.Join(c.LogDir(), "supervisor.log"), 15))}
		}
		if time.Since(t0) > timeout {
			return waitResult{cfg: c, state: st, elapsed: time.Since(t0),
				err: fmt.Errorf("not ready after %v (phase %q); see %s", timeout, st.Phase, c.LogDir())}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freePorts reserves n distinct free loopback ports (all held open until all are chosen).
//
// They are picked at random *outside* the kernel's ephemeral range
// (net.ipv4.ip_local_port_range): a member keeps its ports across stop/start, and a port
// from the ephemeral range could meanwhile become the local end of any outgoing connection
// on the machine, making the restart fail.
func freePorts(n int) ([]int, error) {
	lo, hi := 10000, 32767
	if elo, ehi, err := ephemeralRange(); err == nil {
		switch {
		case elo-1-10000 >= 2000:
			lo, hi = 10000, elo-1
		case 65535-(ehi+1) >= 2000:
			lo, hi = ehi+1, 65535
		}
	}
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for attempts := 0; len(ports) < n; attempts++ {
		if attempts > 100*n {
			return nil, fmt.Errorf("found only %d free loopback ports in %d-%d", len(ports), lo, hi)
		}
		p := lo + mathrand.IntN(hi-lo+1)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue // taken (or just reserved by us)
		}
		ls = append(ls, l)
		ports = append(ports, p)
	}
	return ports, nil
}

func ephemeralRange() (int, int, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("parse ip_local_port_range %q", b)
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("parse ip_local_port_range %q", b)
	}
	return lo, hi, nil
}

// portFree reports whether a loopback port can be bound now.
func portFree(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// writeReady regenerates ready.json and the merged kubeconfig from the member files. It
// takes DIR/.lock so concurrent start/stop of different members do not lose updates.
func writeReady(dir string) (*Ready, error) {
	unlock, err := lock(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	members, err := loadMembers(dir)
	if err != nil {
		return nil, err
	}
	r := &Ready{Version: 1, Dir: dir, KubernetesVersion: member.KubernetesVersion,
		Kubeconfig: filepath.Join(dir, "kubeconfig")}
	merged := clientcmdapi.NewConfig()
	for _, c := range members {
		r.Members = append(r.Members, info(c))
		kc, err := clientcmd.LoadFromFile(c.AdminKubeconfig())
		if err != nil {
			return nil, err
		}
		merged.Clusters[c.Name] = kc.Clusters[c.Name]
		merged.AuthInfos[c.Name] = kc.AuthInfos[c.Name]
		merged.Contexts[c.Name] = kc.Contexts[c.Name]
		if merged.CurrentContext == "" {
			merged.CurrentContext = c.Name
		}
	}
	if err := clientcmd.WriteToFile(*merged, r.Kubeconfig); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	tmp := filepath.Join(dir, ReadyFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return nil, err
	}
	return r, os.Rename(tmp, filepath.Join(dir, ReadyFile))
}

func info(c *member.Config) MemberInfo {
	st, _ := member.ReadState(c)
	mi := MemberInfo{
		Name: c.Name, Server: c.Server(), Kubeconfig: c.AdminKubeconfig(), Context: c.Name,
		CA: c.CAFile(), EtcdURL: c.EtcdURL(), Ports: c.Ports, Running: st.Running(), Phase: st.Phase,
		PIDs: map[string]int{}, LogDir: c.LogDir(), DataDir: c.EtcdDataDir(),
		WithWorkloads: c.WithWorkloads, Nodes: c.NodeNames(),
	}
	if c.WithWorkloads {
		mi.Region, mi.Zones = c.Nodes.Region, c.Nodes.Zones
	}
	if !mi.Running {
		if st.Phase == member.PhaseFailed {
			mi.Message = st.Message
		} else {
			mi.Phase = member.PhaseStopped
		}
	}
	if mi.Running {
		mi.PIDs["supervisor"] = st.Supervisor.PID
		for name, ref := range st.Components {
			if ref.Alive() {
				mi.PIDs[name] = ref.PID
			}
		}
		if st.ReadyAt != nil {
			mi.StartupSeconds = float64(st.ReadyAt.Sub(st.StartedAt).Milliseconds()) / 1000
		}
	}
	return mi
}

// lock takes an exclusive flock on DIR/.lock.
func lock(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
