package proc

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

func TestRefTracksIdentityNotJustPID(t *testing.T) {
	self, err := RefOf(os.Getpid())
	if err != nil || !self.Alive() {
		t.Fatalf("self: %+v %v", self, err)
	}
	if (Ref{PID: self.PID, StartTime: self.StartTime + 1}).Alive() {
		t.Error("a different start time must not count as the same process")
	}
}

func TestTaggedFindsChildrenAndKillTaggedEndsThem(t *testing.T) {
	tag := "TESTENV_PROC_TEST=" + time.Now().Format(time.RFC3339Nano)
	cmd := exec.Command("sleep", "60")
	cmd.Env = append(os.Environ(), tag)
	if err := NewSpawner().Start(cmd); err != nil {
		t.Fatal(err)
	}
	go cmd.Wait()
	ref, _ := RefOf(cmd.Process.Pid)
	// Start returns once the child's exec has begun, but the kernel fills in the new
	// program's environment a moment later (after close-on-exec fds close and the vfork
	// parent is released), so /proc/PID/environ may still read empty: poll for it.
	var got []int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got = Tagged(tag); len(got) > 0 {
			break
		}
	}
	if !slices.Equal(got, []int{cmd.Process.Pid}) {
		t.Fatalf("Tagged = %v, want [%d]", got, cmd.Process.Pid)
	}
	if left := KillTagged(5*time.Second, tag); len(left) > 0 {
		t.Fatalf("left: %v", left)
	}
	if !WaitGone(5*time.Second, ref) {
		t.Fatal("child still alive")
	}
}

func TestRSS(t *testing.T) {
	if rss, err := RSS(os.Getpid()); err != nil || rss == 0 {
		t.Fatalf("RSS = %d, %v", rss, err)
	}
}
