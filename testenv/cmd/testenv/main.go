// Command testenv runs real Kubernetes member clusters (etcd + kube-apiserver, optionally
// kube-controller-manager, kube-scheduler and a fake kubelet) as local processes for
// Flotilla's tests. See docs/testing.md.
//
//	testenv up --members 2 --out DIR [--with-workloads] ...   start, wait, write DIR/ready.json
//	testenv stop|kill|start --member NAME --out DIR           per-member lifecycle
//	testenv status --out DIR [--json]
//	testenv down --out DIR [--purge]
//	testenv lease --out DIR                                   touch the lease (--lease-timeout)
//	testenv karmada up|join|down --out DIR                    a Karmada control plane (karmada.go)
//
// Internal subcommands, run by testenv itself: supervise (one per member), kubelet.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/flotilla/flotilla/testenv/internal/env"
	"github.com/flotilla/flotilla/testenv/internal/kubelet"
	"github.com/flotilla/flotilla/testenv/internal/member"
	"github.com/flotilla/flotilla/testenv/internal/proc"
)

const usage = `usage: testenv <command> [flags]

commands:
  up       start member clusters and wait until all are ready (writes DIR/ready.json)
  start    start a stopped member again (same ports, certificates and data)
  stop     stop a member gracefully (SIGTERM; waits until no process is left)
  kill     kill a member at once (SIGKILL to its process group)
  down     stop every member of DIR; --purge also deletes DIR
  status   show members, pids, memory and /readyz
  lease    touch DIR/lease (for members started with --lease-timeout)
  karmada  a Karmada control plane: 'karmada up', 'karmada join', 'karmada down'

run 'testenv <command> -h' for the flags of a command.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	var err error
	switch cmd {
	case "up":
		err = runUp(args)
	case "start":
		err = runMemberOp(cmd, args)
	case "stop", "kill":
		err = runMemberOp(cmd, args)
	case "down":
		err = runDown(args)
	case "status":
		err = runStatus(args)
	case "lease":
		err = runLease(args)
	case "karmada":
		err = runKarmada(args)
	case "supervise":
		os.Exit(runSupervise(args))
	case "kubelet":
		err = runKubelet(args)
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "testenv: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv %s: %v\n", cmd, err)
		os.Exit(1)
	}
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, " ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func runUp(args []string) error {
	fs := flag.NewFlagSet("up", flag.ExitOnError)
	o := env.UpOptions{Out: os.Stderr}
	members := fs.Int("members", 0, "number of members (named member1..memberN)")
	names := fs.String("names", "", "comma-separated member names (instead of --members)")
	fs.StringVar(&o.Dir, "out", "", "environment directory (required)")
	fs.BoolVar(&o.WithWorkloads, "with-workloads", false, "also run kube-controller-manager, kube-scheduler, fake nodes and a fake kubelet")
	controllers := fs.String("controllers", "", "kube-controller-manager --controllers (default: "+strings.Join(member.DefaultControllers, ",")+")")
	o.Nodes = env.PerMember{Default: "2"}
	o.NodeCPU = env.PerMember{Default: "8"}
	o.NodeMemory = env.PerMember{Default: "32Gi"}
	o.NodePods = env.PerMember{Default: "110"}
	fs.Var(&o.Nodes, "nodes", "fake nodes per member; NAME=K overrides one member (repeatable)")
	fs.Var(&o.NodeCPU, "node-cpu", "CPU capacity of each fake node; NAME=Q overrides one member")
	fs.Var(&o.NodeMemory, "node-memory", "memory capacity of each fake node; NAME=Q overrides one member")
	fs.Var(&o.NodePods, "node-pods", "pod capacity of each fake node; NAME=N overrides one member")
	fs.Var(&o.Region, "region", "topology.kubernetes.io/region of the nodes (default region-<member>); NAME=R overrides one member")
	fs.Var(&o.Zones, "zones", "comma-separated zones, assigned round-robin to nodes (default <region>-a,<region>-b); NAME=Z1,Z2 overrides one member")
	fs.Var(&o.PodCIDR, "pod-cidr", "pod IP range of the fake kubelet (default 10.<128+i>.0.0/16 for the i-th member); NAME=CIDR overrides one member")
	fs.StringVar(&o.ServiceCIDR, "service-cidr", "10.96.0.0/16", "kube-apiserver --service-cluster-ip-range")
	var apiFlags stringList
	fs.Var(&apiFlags, "apiserver-flag", "extra kube-apiserver flag, e.g. --apiserver-flag=--v=2 (repeatable; overrides testenv's)")
	fs.DurationVar(&o.ReadyTimeout, "ready-timeout", 180*time.Second, "how long each member may take to become ready")
	fs.IntVar(&o.ParentPID, "parent-pid", 0, "tear every member down when this process exits")
	fs.DurationVar(&o.LeaseTimeout, "lease-timeout", 0, "tear members down if DIR/lease is not touched this often (0 = off)")
	fs.StringVar(&o.BinDir, "bin-dir", "", "directory with etcd, kube-apiserver, ... (default $TESTENV_BIN_DIR or build.sh's)")
	_ = fs.Parse(args)
	o.APIServerFlags = apiFlags
	if *controllers != "" {
		o.Controllers = strings.Split(*controllers, ",")
	}
	switch {
	case *names != "" && *members != 0:
		return fmt.Errorf("give either --members or --names, not both")
	case *names != "":
		o.Names = strings.Split(*names, ",")
	default:
		for i := 1; i <= *members; i++ {
			o.Names = append(o.Names, "member"+strconv.Itoa(i))
		}
	}
	r, err := env.Up(o)
	if err != nil {
		return err
	}
	fmt.Println(filepath.Join(r.Dir, env.ReadyFile))
	return nil
}

func runMemberOp(op string, args []string) error {
	fs := flag.NewFlagSet(op, flag.ExitOnError)
	dir := fs.String("out", "", "environment directory (required)")
	name := fs.String("member", "", "member name (required)")
	_ = fs.Parse(args)
	if *name == "" {
		return fmt.Errorf("--member is required")
	}
	switch op {
	case "start":
		_, err := env.Start(*dir, *name, os.Stderr)
		return err
	default:
		return env.Stop(*dir, *name, op == "kill", os.Stderr)
	}
}

func runDown(args []string) error {
	fs := flag.NewFlagSet("down", flag.ExitOnError)
	dir := fs.String("out", "", "environment directory (required)")
	purge := fs.Bool("purge", false, "delete the directory afterwards (logs included)")
	_ = fs.Parse(args)
	return env.Down(*dir, *purge, os.Stderr)
}

func runStatus(args []string) error {
	fs := flag.NewFlagSet("status", flag.ExitOnError)
	dir := fs.String("out", "", "environment directory (required)")
	asJSON := fs.Bool("json", false, "print JSON")
	_ = fs.Parse(args)
	rows, err := env.Status(*dir)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tPHASE\tSERVER\tREADYZ\tRSS\tPIDS")
	for _, r := range rows {
		var pids []string
		for _, k := range []string{"supervisor", member.Etcd, member.APIServer, member.ControllerManager, member.Scheduler, member.Kubelet,
			member.KarmadaAggregatedAPIServer, member.KarmadaWebhook, member.KarmadaControllerManager, member.KarmadaScheduler} {
			if p, ok := r.PIDs[k]; ok {
				pids = append(pids, fmt.Sprintf("%s=%d", k, p))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%dMiB\t%s\n", r.Name, r.Phase, r.Server, r.Readyz, r.RSS>>20, strings.Join(pids, " "))
	}
	return tw.Flush()
}

func runLease(args []string) error {
	fs := flag.NewFlagSet("lease", flag.ExitOnError)
	dir := fs.String("out", "", "environment directory (required)")
	_ = fs.Parse(args)
	p := filepath.Join(*dir, "lease")
	now := time.Now()
	if err := os.Chtimes(p, now, now); err != nil {
		return os.WriteFile(p, nil, 0o644)
	}
	return nil
}

func runSupervise(args []string) int {
	fs := flag.NewFlagSet("supervise", flag.ExitOnError)
	dir := fs.String("out", "", "")
	name := fs.String("member", "", "")
	pid := fs.Int("startup-pid", 0, "")
	start := fs.Uint64("startup-start-time", 0, "")
	token := fs.String("startup-token", "", "")
	_ = fs.Parse(args)
	cfg, err := member.Load(*dir, *name)
	if err != nil {
		fmt.Fprintf(os.Stderr, "supervise: %v\n", err)
		return 1
	}
	return member.Supervise(cfg, member.Startup{Ref: proc.Ref{PID: *pid, StartTime: *start}, Token: *token})
}

func runKubelet(args []string) error {
	fs := flag.NewFlagSet("kubelet", flag.ExitOnError)
	var c kubelet.Config
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig of the member")
	nodes := fs.String("nodes", "", "comma-separated node names")
	fs.StringVar(&c.CPU, "cpu", "8", "CPU capacity per node")
	fs.StringVar(&c.Memory, "memory", "32Gi", "memory capacity per node")
	fs.StringVar(&c.Pods, "pods", "110", "pod capacity per node")
	fs.StringVar(&c.Region, "region", "", "topology.kubernetes.io/region label")
	zones := fs.String("zones", "", "comma-separated zones, round-robin over nodes")
	fs.StringVar(&c.PodCIDR, "pod-cidr", "10.128.0.0/16", "pod IP range")
	fs.StringVar(&c.NodeIP, "node-ip", "127.0.0.1", "node InternalIP and pod hostIP")
	fs.DurationVar(&c.LeaseDuration, "lease-duration", 40*time.Second, "node Lease duration (renewed every quarter)")
	fs.DurationVar(&c.JobPodDuration, "job-pod-duration", 2*time.Second, "how long a Job's pod runs before it succeeds")
	_ = fs.Parse(args)
	c.Nodes, c.Zones = kubelet.ParseList(*nodes), kubelet.ParseList(*zones)
	c.KubeletVersion = member.KubernetesVersion
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return kubelet.Run(ctx, c)
}
