// Package proc is the process plumbing that keeps testenv free of orphans: identities that
// survive pid reuse (pid + start time from /proc), a spawner whose children die with their
// parent (PR_SET_PDEATHSIG from a thread that lives as long as the process), environment
// tags that let a sweep find every process of one environment, and group signalling.
package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Env tags set on every process a testenv supervisor runs (and on the supervisor itself).
// Every process carrying them is SIGKILLed by `stop`/`down`, so the names are deliberately
// ones no caller would export for its own use (e.g. to tell tests where DIR is).
const (
	TagDir    = "TESTENV_INTERNAL_OWNER_DIR"
	TagMember = "TESTENV_INTERNAL_OWNER_MEMBER"
)

// WithoutTags returns env minus any testenv tag, so a process started from inside an
// environment (a nested testenv, a test run by a member's process) is not mistaken for it.
func WithoutTags(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if strings.HasPrefix(kv, TagDir+"=") || strings.HasPrefix(kv, TagMember+"=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// Ref identifies one process: the pid plus its start time in clock ticks since boot, so a
// recycled pid is never mistaken for the process we started.
type Ref struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"startTime"`
}

// RefOf reads the identity of a running pid.
func RefOf(pid int) (Ref, error) {
	st, _, err := stat(pid)
	if err != nil {
		return Ref{}, err
	}
	return Ref{PID: pid, StartTime: st}, nil
}

// Alive reports whether the process still runs (zombies count as gone).
func (r Ref) Alive() bool {
	if r.PID <= 0 {
		return false
	}
	st, state, err := stat(r.PID)
	if err != nil {
		return false
	}
	return st == r.StartTime && state != 'Z' && state != 'X'
}

// Signal sends sig to the process if it is still the same process.
func (r Ref) Signal(sig syscall.Signal) error {
	if !r.Alive() {
		return os.ErrProcessDone
	}
	return syscall.Kill(r.PID, sig)
}

// SignalGroup sends sig to the process group led by this process (testenv supervisors are
// session and group leaders, so their pid is the group id).
func (r Ref) SignalGroup(sig syscall.Signal) error {
	if !r.Alive() {
		// The leader is gone but members of its group may remain; the group id is still
		// valid while any member lives.
		err := syscall.Kill(-r.PID, sig)
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return err
	}
	return syscall.Kill(-r.PID, sig)
}

// stat returns the start time (field 22) and state (field 3) of /proc/<pid>/stat.
func stat(pid int) (uint64, byte, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// comm (field 2) may contain spaces and parentheses; fields resume after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(b[i+2:]))
	// fields[0] is field 3 (state); field 22 is fields[19].
	if len(fields) < 20 {
		return 0, 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(fields))
	}
	st, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return 0, 0, err
	}
	return st, fields[0][0], nil
}

// RSS returns the resident set size of pid in bytes (VmRSS from /proc/<pid>/status).
func RSS(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, err := strconv.ParseUint(f[0], 10, 64)
				return kb * 1024, err
			}
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

// Tagged lists the pids whose environment has every one of the given KEY=VALUE tags.
// Processes that vanish or cannot be read are skipped.
func Tagged(tags ...string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || len(env) == 0 {
			continue
		}
		vars := bytes.Split(env, []byte{0})
		matched := 0
		for _, want := range tags {
			for _, v := range vars {
				if string(v) == want {
					matched++
					break
				}
			}
		}
		if matched == len(tags) {
			if _, state, err := stat(pid); err == nil && state != 'Z' && state != 'X' {
				out = append(out, pid)
			}
		}
	}
	return out
}

// KillTagged SIGKILLs every process carrying the tags and waits up to timeout for them to
// disappear. It returns the pids that were still alive at the end.
//
// A process in the middle of exec shows an empty environment for a moment, so one empty
// scan is not proof: the sweep ends after two empty scans in a row.
func KillTagged(timeout time.Duration, tags ...string) []int {
	deadline := time.Now().Add(timeout)
	empty := 0
	for {
		pids := Tagged(tags...)
		if len(pids) == 0 {
			if empty++; empty >= 2 {
				return nil
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		empty = 0
		if time.Now().After(deadline) {
			return pids
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitGone polls until none of refs is alive or the timeout passes; it reports success.
func WaitGone(timeout time.Duration, refs ...Ref) bool {
	deadline := time.Now().Add(timeout)
	for {
		alive := false
		for _, r := range refs {
			if r.Alive() {
				alive = true
				break
			}
		}
		if !alive {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Spawner starts children that receive SIGKILL when this process dies, however it dies.
//
// PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not the process, and
// the Go runtime may retire threads. So every fork happens on one goroutine locked to its OS
// thread for the life of the process: that thread only ends with the process.
type Spawner struct {
	reqs chan spawnReq
}

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

// NewSpawner starts the dedicated forking thread.
func NewSpawner() *Spawner {
	s := &Spawner{reqs: make(chan spawnReq)}
	ready := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread must outlive every child
		close(ready)
		for r := range s.reqs {
			r.done <- r.cmd.Start()
		}
	}()
	<-ready
	return s
}

// Start starts cmd with Pdeathsig=SIGKILL (in the caller's process group).
func (s *Spawner) Start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	done := make(chan error, 1)
	s.reqs <- spawnReq{cmd: cmd, done: done}
	return <-done
}
