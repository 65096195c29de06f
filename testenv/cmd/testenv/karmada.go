package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/flotilla/flotilla/testenv/internal/env"
	"github.com/flotilla/flotilla/testenv/internal/karmada"
	"github.com/flotilla/flotilla/testenv/internal/member"
)

// KarmadaName is the member name of the Karmada control plane in DIR: its files are under
// DIR/karmada/ and its admin kubeconfig is DIR/karmada.kubeconfig.
const KarmadaName = "karmada"

const karmadaUsage = `usage: testenv karmada <command> [flags]

commands:
  up    start a Karmada control plane in DIR (etcd, kube-apiserver as karmada-apiserver,
        kube-controller-manager, karmada-aggregated-apiserver, karmada-webhook,
        karmada-controller-manager, karmada-scheduler); prints "ready" when all is up and
        writes DIR/karmada.kubeconfig, DIR/pids ("PID NAME" lines), DIR/karmada.json
  join  join member clusters in Push mode (Secret + Cluster, as karmadactl join does)
        and wait until they are Ready
  down  stop it (same as 'testenv down'); --purge also deletes DIR
`

func runKarmada(args []string) error {
	if len(args) < 1 {
		fmt.Fprint(os.Stderr, karmadaUsage)
		os.Exit(2)
	}
	switch args[0] {
	case "up":
		return runKarmadaUp(args[1:])
	case "join":
		return runKarmadaJoin(args[1:])
	case "down":
		return runDown(args[1:])
	case "-h", "--help", "help":
		fmt.Print(karmadaUsage)
		return nil
	}
	fmt.Fprintf(os.Stderr, "testenv karmada: unknown command %q\n\n%s", args[0], karmadaUsage)
	os.Exit(2)
	return nil
}

func runKarmadaUp(args []string) error {
	fs := flag.NewFlagSet("karmada up", flag.ExitOnError)
	o := env.UpOptions{Out: os.Stderr, Names: []string{KarmadaName}, ServiceCIDR: "10.96.0.0/16",
		Karmada: &member.Karmada{Args: map[string][]string{}}}
	fs.StringVar(&o.Dir, "out", "", "environment directory (required)")
	fs.DurationVar(&o.ReadyTimeout, "ready-timeout", 300*time.Second, "how long the control plane may take to become ready")
	fs.IntVar(&o.ParentPID, "parent-pid", 0, "tear the control plane down when this process exits")
	fs.DurationVar(&o.LeaseTimeout, "lease-timeout", 0, "tear it down if DIR/lease is not touched this often (0 = off)")
	fs.StringVar(&o.BinDir, "bin-dir", "", "directory with the binaries and karmada-crds/ (default $TESTENV_BIN_DIR or build.sh's)")
	fs.BoolVar(&o.Karmada.WithoutControllers, "without-controllers", false,
		"start all but karmada-controller-manager and karmada-scheduler; run them yourself from DIR/karmada.json's commands (e.g. for a cold start)")
	var apiFlags stringList
	fs.Var(&apiFlags, "kube-apiserver-arg", "extra karmada-apiserver (kube-apiserver) flag, repeatable; appended last, so it overrides testenv's")
	perComponent := map[string]*stringList{}
	for _, c := range []string{member.Etcd, member.ControllerManager, member.KarmadaAggregatedAPIServer, member.KarmadaWebhook,
		member.KarmadaControllerManager, member.KarmadaScheduler} {
		l := &stringList{}
		perComponent[c] = l
		fs.Var(l, c+"-arg", "extra "+c+" flag, e.g. --"+c+"-arg=--v=2 (repeatable; appended last, so it overrides testenv's)")
	}
	_ = fs.Parse(args)
	o.APIServerFlags = apiFlags
	for c, l := range perComponent {
		if len(*l) > 0 {
			o.Karmada.Args[c] = *l
		}
	}
	t0 := time.Now()
	if _, err := env.Up(o); err != nil {
		return err
	}
	dir, _ := filepath.Abs(o.Dir)
	cfg, err := member.Load(dir, KarmadaName)
	if err != nil {
		return err
	}
	sum, err := cfg.KarmadaSummary()
	if err != nil {
		return err
	}
	var pids strings.Builder
	for _, name := range member.KarmadaComponents {
		if o.Karmada.WithoutControllers && (name == member.KarmadaControllerManager || name == member.KarmadaScheduler) {
			continue
		}
		pid, ok := sum.PIDs[name]
		if !ok {
			return fmt.Errorf("%s is not running; see %s", name, sum.LogDir)
		}
		fmt.Fprintf(&pids, "%d %s\n", pid, name)
	}
	if err := os.WriteFile(filepath.Join(dir, "pids"), []byte(pids.String()), 0o644); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(sum, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "karmada.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "testenv: Karmada %s up in %.1fs: kubeconfig %s, pids %s, logs %s\n",
		sum.Version, time.Since(t0).Seconds(), sum.Kubeconfig, filepath.Join(dir, "pids"), sum.LogDir)
	fmt.Println("ready")
	return nil
}

func runKarmadaJoin(args []string) error {
	fs := flag.NewFlagSet("karmada join", flag.ExitOnError)
	dir := fs.String("out", "", "environment directory of `testenv karmada up` (required)")
	var specs stringList
	fs.Var(&specs, "member", "NAME=KUBECONFIG of a member to join (repeatable); an administrator's kubeconfig of the member")
	wait := fs.Duration("wait", 3*time.Minute, "wait this long for every joined Cluster to be Ready (0 = do not wait)")
	_ = fs.Parse(args)
	if *dir == "" || len(specs) == 0 {
		return fmt.Errorf("--out and at least one --member NAME=KUBECONFIG are required")
	}
	c, err := karmada.NewClient(filepath.Join(*dir, KarmadaName+".kubeconfig"))
	if err != nil {
		return err
	}
	ctx := context.Background()
	type spec struct{ name, path string }
	var members []spec
	var names []string
	for _, s := range specs {
		name, path, ok := strings.Cut(s, "=")
		if !ok || name == "" || path == "" {
			return fmt.Errorf("--member %q: want NAME=KUBECONFIG", s)
		}
		members = append(members, spec{name, path})
		names = append(names, name)
	}
	// Eight joins at a time: a hundred members join in seconds.
	t0 := time.Now()
	errs := make([]error, len(members))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			creds, err := karmada.ObtainCredentials(ctx, m.name, m.path)
			if err == nil {
				err = c.Join(ctx, creds)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "testenv: %d cluster(s) joined in %.1fs\n", len(names), time.Since(t0).Seconds())
	if *wait <= 0 {
		return nil
	}
	t0 = time.Now()
	for {
		err := c.ClustersReady(ctx, names)
		if err == nil {
			fmt.Fprintf(os.Stderr, "testenv: %d cluster(s) Ready after %.1fs\n", len(names), time.Since(t0).Seconds())
			return nil
		}
		if time.Since(t0) > *wait {
			return fmt.Errorf("after %v: %w (see %s)", *wait, err,
				filepath.Join(*dir, KarmadaName, "logs", member.KarmadaControllerManager+".log"))
		}
		time.Sleep(500 * time.Millisecond)
	}
}
