package env

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/flotilla/flotilla/testenv/internal/member"
	"github.com/flotilla/flotilla/testenv/internal/proc"
)

// PerMember is a flag value that has a default and optional per-member overrides
// ("8" sets the default; "member2=4" overrides it for member2).
type PerMember struct {
	Default string
	ByName  map[string]string
}

// Set implements flag.Value.
func (p *PerMember) Set(v string) error {
	if name, val, ok := strings.Cut(v, "="); ok && memberName.MatchString(name) {
		if p.ByName == nil {
			p.ByName = map[string]string{}
		}
		p.ByName[name] = val
		return nil
	}
	p.Default = v
	return nil
}

func (p *PerMember) String() string {
	if p == nil {
		return ""
	}
	return p.Default
}

// Get returns the value for a member.
func (p *PerMember) Get(name string) string {
	if v, ok := p.ByName[name]; ok {
		return v
	}
	return p.Default
}

var memberName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$`)

// UpOptions are the flags of `testenv up`.
type UpOptions struct {
	Dir            string
	Names          []string
	WithWorkloads  bool
	Controllers    []string
	Nodes          PerMember
	NodeCPU        PerMember
	NodeMemory     PerMember
	NodePods       PerMember
	Region         PerMember // default: region-<member>
	Zones          PerMember // comma-separated; default: <region>-a,<region>-b
	PodCIDR        PerMember // default: 10.<128+i>.0.0/16 for the i-th member (0-based)
	ServiceCIDR    string
	APIServerFlags []string
	ReadyTimeout   time.Duration
	ParentPID      int
	LeaseTimeout   time.Duration
	BinDir         string
	Out            io.Writer
	// Karmada, when set, makes every member a Karmada control plane (see `testenv karmada`);
	// its ports are assigned here.
	Karmada *member.Karmada
}

// Up prepares and starts every member in parallel and returns once all are ready.
func Up(o UpOptions) (*Ready, error) {
	dir, err := absDir(o.Dir)
	if err != nil {
		return nil, err
	}
	if len(o.Names) == 0 {
		return nil, errors.New("no members: give --members N or --names a,b")
	}
	seen := map[string]bool{}
	for _, n := range o.Names {
		if !memberName.MatchString(n) {
			return nil, fmt.Errorf("member name %q: want a DNS label (lower-case letters, digits, '-')", n)
		}
		if seen[n] {
			return nil, fmt.Errorf("member name %q given twice", n)
		}
		seen[n] = true
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// Refuse to start over a live environment; members that are down are replaced.
	if old, err := loadMembers(dir); err == nil {
		var live []string
		for _, c := range old {
			if st, _ := member.ReadState(c); st.Running() || len(proc.Tagged(c.Tags()...)) > 0 {
				live = append(live, c.Name)
			}
		}
		if len(live) > 0 {
			return nil, fmt.Errorf("%s already has running members (%s); run `testenv down --out %s` first",
				dir, strings.Join(live, ", "), dir)
		}
	}
	_ = os.Remove(filepath.Join(dir, ReadyFile))
	if o.Karmada != nil && o.WithWorkloads {
		return nil, errors.New("a Karmada control plane runs no workloads (--with-workloads)")
	}
	bins, err := resolveBinaries(o.BinDir, o.WithWorkloads || o.Karmada != nil, o.Karmada != nil)
	if err != nil {
		return nil, err
	}
	var parent *proc.Ref
	if o.ParentPID > 0 {
		r, err := proc.RefOf(o.ParentPID)
		if err != nil {
			return nil, fmt.Errorf("--parent-pid %d: %w", o.ParentPID, err)
		}
		parent = &r
	}
	if o.LeaseTimeout > 0 {
		if err := os.WriteFile(filepath.Join(dir, "lease"), nil, 0o644); err != nil {
			return nil, err
		}
	}
	perMember := 3
	if o.WithWorkloads {
		perMember = 5
	}
	if o.Karmada != nil {
		perMember = 3 + member.KarmadaPortCount
	}
	ports, err := freePorts(perMember * len(o.Names))
	if err != nil {
		return nil, err
	}

	var cfgs []*member.Config
	for i, name := range o.Names {
		p := ports[i*perMember:]
		c := &member.Config{
			Name: name, EnvDir: dir, Binaries: bins, ServiceCIDR: o.ServiceCIDR,
			Ports:          member.Ports{APIServer: p[0], EtcdClient: p[1], EtcdPeer: p[2]},
			WithWorkloads:  o.WithWorkloads,
			APIServerFlags: o.APIServerFlags,
			ReadyTimeout:   member.Duration{Duration: o.ReadyTimeout},
			LeaseTimeout:   member.Duration{Duration: o.LeaseTimeout},
			Parent:         parent,
		}
		if o.Karmada != nil {
			k := *o.Karmada
			k.Ports.Assign(p[3:])
			c.Karmada = &k
		}
		if o.WithWorkloads {
			c.Ports.ControllerManager, c.Ports.Scheduler = p[3], p[4]
			c.Controllers = o.Controllers
			if len(c.Controllers) == 0 {
				c.Controllers = member.DefaultControllers
			}
			count, err := strconv.Atoi(o.Nodes.Get(name))
			if err != nil || count < 0 {
				return nil, fmt.Errorf("--nodes for %s: %q is not a number of nodes (0 or more)", name, o.Nodes.Get(name))
			}
			region := o.Region.Get(name)
			if region == "" {
				region = "region-" + name
			}
			zones := splitList(o.Zones.Get(name))
			if len(zones) == 0 {
				zones = []string{region + "-a", region + "-b"}
			}
			podCIDR := o.PodCIDR.Get(name)
			if podCIDR == "" {
				podCIDR = fmt.Sprintf("10.%d.0.0/16", 128+i%128)
			}
			c.Nodes = member.Nodes{Count: count, CPU: o.NodeCPU.Get(name), Memory: o.NodeMemory.Get(name),
				Pods: o.NodePods.Get(name), Region: region, Zones: zones, PodCIDR: podCIDR}
		}
		cfgs = append(cfgs, c)
	}

	// Fresh members: old data of a member with the same name is removed.
	for _, c := range cfgs {
		if err := os.RemoveAll(c.Dir()); err != nil {
			return nil, err
		}
		_ = os.Remove(c.AdminKubeconfig())
	}
	if err := prepareAll(cfgs); err != nil {
		return nil, err
	}
	ef, _ := json.MarshalIndent(envFile{Members: o.Names, Created: time.Now().Format(time.RFC3339)}, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "testenv.json"), append(ef, '\n'), 0o644); err != nil {
		return nil, err
	}

	fmt.Fprintf(o.Out, "testenv: starting %d member(s) in %s (workloads: %v)\n", len(cfgs), dir, o.WithWorkloads)
	results := startAll(cfgs, o.ReadyTimeout, o.Out)
	var failed []string
	for _, r := range results {
		if r.err != nil {
			failed = append(failed, fmt.Sprintf("member %s failed to start: %v\n  logs: %s", r.cfg.Name, r.err, r.cfg.LogDir()))
		}
	}
	if len(failed) > 0 {
		var wg sync.WaitGroup
		for _, c := range cfgs {
			wg.Go(func() { _ = stopMember(c, false, 30*time.Second) })
		}
		wg.Wait()
		return nil, errors.New(strings.Join(failed, "\n"))
	}
	for _, r := range results {
		fmt.Fprintf(o.Out, "testenv: %-10s ready in %5.1fs  %s\n", r.cfg.Name, r.elapsed.Seconds(), r.cfg.Server())
	}
	ready, err := writeReady(dir)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Out, "testenv: ready: %s\n", filepath.Join(dir, ReadyFile))
	return ready, nil
}

func prepareAll(cfgs []*member.Config) error {
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i, c := range cfgs {
		wg.Go(func() {
			if err := c.Prepare(); err != nil {
				errs[i] = err
				return
			}
			errs[i] = c.Save()
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startAll spawns the supervisors of cfgs at once, waits for all, and releases those that
// became ready (a failed one has already torn itself down).
func startAll(cfgs []*member.Config, timeout time.Duration, out io.Writer) []waitResult {
	var mu sync.Mutex
	progress := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "testenv: %s\n", s)
	}
	results := make([]waitResult, len(cfgs))
	var wg sync.WaitGroup
	for i, c := range cfgs {
		wg.Go(func() {
			ports := []int{c.Ports.APIServer, c.Ports.EtcdClient, c.Ports.EtcdPeer,
				c.Ports.ControllerManager, c.Ports.Scheduler}
			if c.Karmada != nil {
				ports = append(ports, c.Karmada.Ports.List()...)
			}
			for _, port := range ports {
				if port != 0 && !portFree(port) {
					results[i] = waitResult{cfg: c, err: fmt.Errorf("port %d is in use by another process", port)}
					return
				}
			}
			sup, token, err := spawnSupervisor(c)
			if err != nil {
				results[i] = waitResult{cfg: c, err: err}
				return
			}
			r := waitReady(c, sup, timeout+30*time.Second, progress)
			if r.err == nil {
				if err := release(c, token); err != nil {
					r.err = err
				}
			}
			results[i] = r
		})
	}
	wg.Wait()
	return results
}

// Start restarts a stopped member with its existing ports, certificates and data.
func Start(dir, name string, out io.Writer) (*Ready, error) {
	dir, err := absDir(dir)
	if err != nil {
		return nil, err
	}
	c, err := findMember(dir, name)
	if err != nil {
		return nil, err
	}
	if st, _ := member.ReadState(c); st.Running() {
		return nil, fmt.Errorf("member %s is already running (supervisor pid %d)", name, st.Supervisor.PID)
	}
	if left := proc.KillTagged(5*time.Second, c.Tags()...); len(left) > 0 {
		return nil, fmt.Errorf("member %s: leftover processes %v would not die", name, left)
	}
	r := startAll([]*member.Config{c}, c.ReadyTimeout.Duration, out)[0]
	if r.err != nil {
		return nil, fmt.Errorf("member %s failed to start: %v\n  logs: %s", name, r.err, c.LogDir())
	}
	fmt.Fprintf(out, "testenv: %s ready in %.1fs  %s\n", name, r.elapsed.Seconds(), c.Server())
	return writeReady(dir)
}

// Stop stops one member: gracefully (SIGTERM to its supervisor, which stops the
// components in reverse order) or, with kill, at once (SIGKILL to the process group).
// Either way it returns only when no process of the member remains.
func Stop(dir, name string, kill bool, out io.Writer) error {
	dir, err := absDir(dir)
	if err != nil {
		return err
	}
	c, err := findMember(dir, name)
	if err != nil {
		return err
	}
	verb := "stopped"
	if kill {
		verb = "killed"
	}
	if err := stopMember(c, kill, 60*time.Second); err != nil {
		return err
	}
	fmt.Fprintf(out, "testenv: %s %s\n", name, verb)
	_, err = writeReady(dir)
	return err
}

func stopMember(c *member.Config, kill bool, grace time.Duration) error {
	st, _ := member.ReadState(c)
	sup := st.Supervisor
	if sup.Alive() {
		if kill {
			_ = sup.SignalGroup(syscall.SIGKILL)
		} else {
			_ = sup.Signal(syscall.SIGTERM)
			if !proc.WaitGone(grace, sup) {
				_ = sup.SignalGroup(syscall.SIGKILL)
			}
		}
	} else if sup.PID > 0 {
		// Supervisor gone; its group may still hold children (it cannot, given Pdeathsig,
		// but the sweep below is the guarantee).
		_ = sup.SignalGroup(syscall.SIGKILL)
	}
	if left := proc.KillTagged(10*time.Second, c.Tags()...); len(left) > 0 {
		return fmt.Errorf("member %s: processes %v survived SIGKILL", c.Name, left)
	}
	// The apiserver port must refuse connections before we report success.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(c.Ports.APIServer), 200*time.Millisecond)
		if err != nil {
			return nil
		}
		conn.Close()
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("member %s: port %d still accepts connections after stop", c.Name, c.Ports.APIServer)
}

// Down stops every member (gracefully, in parallel) and sweeps any process tagged with DIR.
func Down(dir string, purge bool, out io.Writer) error {
	dir, err := absDir(dir)
	if err != nil {
		return err
	}
	cfgs, loadErr := loadMembers(dir)
	var wg sync.WaitGroup
	errs := make([]error, len(cfgs))
	for i, c := range cfgs {
		wg.Go(func() { errs[i] = stopMember(c, false, 30*time.Second) })
	}
	wg.Wait()
	left := proc.KillTagged(10*time.Second, proc.TagDir+"="+dir)
	_ = os.Remove(filepath.Join(dir, ReadyFile))
	if len(left) > 0 {
		errs = append(errs, fmt.Errorf("processes %v survived", left))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if loadErr != nil && len(cfgs) == 0 {
		fmt.Fprintf(out, "testenv: nothing to stop in %s (%v)\n", dir, loadErr)
	} else {
		fmt.Fprintf(out, "testenv: down: %d member(s) stopped, no processes left\n", len(cfgs))
	}
	if purge {
		return os.RemoveAll(dir)
	}
	return nil
}

// StatusRow is one member in `testenv status`.
type StatusRow struct {
	MemberInfo
	Readyz string            `json:"readyz"`
	RSS    uint64            `json:"rssBytes"`          // all processes of the member
	RSSOf  map[string]uint64 `json:"rssBytesByProcess"` // per process (supervisor, etcd, ...)
}

// Status reports each member's processes and asks its apiserver for /readyz.
func Status(dir string) ([]StatusRow, error) {
	dir, err := absDir(dir)
	if err != nil {
		return nil, err
	}
	cfgs, err := loadMembers(dir)
	if err != nil {
		return nil, err
	}
	var rows []StatusRow
	for _, c := range cfgs {
		row := StatusRow{MemberInfo: info(c), Readyz: "-", RSSOf: map[string]uint64{}}
		for name, pid := range row.PIDs {
			if rss, err := proc.RSS(pid); err == nil {
				row.RSS += rss
				row.RSSOf[name] = rss
			}
		}
		if row.Running {
			row.Readyz = readyz(c)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func readyz(c *member.Config) string {
	hc, err := member.AdminHTTPClient(c)
	if err != nil {
		return err.Error()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.Server()+"/readyz", nil)
	resp, err := hc.Do(req)
	if err != nil {
		return "unreachable"
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	if resp.StatusCode == http.StatusOK {
		return strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("HTTP %d", resp.StatusCode)
}

// resolveBinaries finds the executables: --bin-dir, else $TESTENV_BIN_DIR, else the
// directory of this executable if it holds etcd, else build.sh's default directory.
func resolveBinaries(binDir string, workloads, karmada bool) (member.Binaries, error) {
	self, err := os.Executable()
	if err != nil {
		return member.Binaries{}, err
	}
	if binDir == "" {
		binDir = os.Getenv("TESTENV_BIN_DIR")
	}
	if binDir == "" {
		if _, err := os.Stat(filepath.Join(filepath.Dir(self), "etcd")); err == nil {
			binDir = filepath.Dir(self)
		}
	}
	if binDir == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache")
		}
		binDir = filepath.Join(cache, "flotilla", "testenv", "bin")
	}
	b := member.Binaries{
		Etcd: filepath.Join(binDir, "etcd"), APIServer: filepath.Join(binDir, "kube-apiserver"),
		ControllerManager: filepath.Join(binDir, "kube-controller-manager"),
		Scheduler:         filepath.Join(binDir, "kube-scheduler"), Testenv: self,
	}
	need := []string{b.Etcd, b.APIServer}
	if workloads {
		need = append(need, b.ControllerManager, b.Scheduler)
	}
	if karmada {
		b.KarmadaAggregatedAPIServer = filepath.Join(binDir, "karmada-aggregated-apiserver")
		b.KarmadaControllerManager = filepath.Join(binDir, "karmada-controller-manager")
		b.KarmadaScheduler = filepath.Join(binDir, "karmada-scheduler")
		b.KarmadaWebhook = filepath.Join(binDir, "karmada-webhook")
		b.KarmadaCRDs = filepath.Join(binDir, "karmada-crds")
		need = append(need, b.KarmadaAggregatedAPIServer, b.KarmadaControllerManager, b.KarmadaScheduler,
			b.KarmadaWebhook, filepath.Join(b.KarmadaCRDs, "VERSION"))
	}
	for _, p := range need {
		if _, err := os.Stat(p); err != nil {
			return b, fmt.Errorf("%s not found; build the binaries with testenv/build.sh (or pass --bin-dir)", p)
		}
	}
	return b, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
