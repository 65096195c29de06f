package kubelet

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func runShell(t *testing.T, ctx context.Context, stdin string, argv ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	env := []envVar{{"GREETING", "hello world"}, {"EMPTY", ""}}
	code = newShell(ctx, "web-0", env, strings.NewReader(stdin), &out, &errOut).Run(argv)
	return out.String(), errOut.String(), code
}

// TestShell covers the built-in exec responder command by command.
func TestShell(t *testing.T) {
	sh := func(script string) []string { return []string{"sh", "-c", script} }
	cases := []struct {
		name        string
		argv        []string
		stdin       string
		out, err    string
		code        int
		errContains string
	}{
		{name: "echo", argv: []string{"echo", "hello"}, out: "hello\n"},
		{name: "echo args joined", argv: []string{"echo", "a", "b  c"}, out: "a b  c\n"},
		{name: "echo -n", argv: []string{"echo", "-n", "x"}, out: "x"},
		{name: "echo nothing", argv: []string{"echo"}, out: "\n"},
		{name: "echo by path", argv: []string{"/bin/echo", "p"}, out: "p\n"},
		{name: "cat copies stdin", argv: []string{"cat"}, stdin: "line 1\nline 2\n", out: "line 1\nline 2\n"},
		{name: "cat a file", argv: []string{"cat", "/etc/passwd"}, err: "cat: /etc/passwd: No such file or directory\n", code: 1},
		{name: "hostname", argv: []string{"hostname"}, out: "web-0\n"},
		{name: "env", argv: []string{"env"}, out: "HOSTNAME=web-0\nGREETING=hello world\nEMPTY=\n"},
		{name: "printenv NAME", argv: []string{"/usr/bin/printenv", "GREETING"}, out: "hello world\n"},
		{name: "printenv missing", argv: []string{"printenv", "NOPE"}, code: 1},
		{name: "pwd", argv: []string{"pwd"}, out: "/\n"},
		{name: "true", argv: []string{"true"}},
		{name: "false", argv: []string{"false"}, code: 1},
		{name: "exit 3", argv: []string{"exit", "3"}, code: 3},
		{name: "exit 256 wraps", argv: []string{"exit", "256"}, code: 0},
		{name: "exit junk", argv: []string{"exit", "x"}, err: "sh: exit: Illegal number: x\n", code: 2},
		{name: "sleep 0", argv: []string{"sleep", "0.01"}},
		{name: "sleep junk", argv: []string{"sleep", "soon"}, err: "sleep: invalid time interval 'soon'\n", code: 1},
		{name: "unknown command", argv: []string{"ls", "-l"}, err: "ls: command not found\n", code: 127},
		{name: "unknown path", argv: []string{"/opt/app/run"}, err: "/opt/app/run: command not found\n", code: 127},
		{name: "no command", argv: nil},

		{name: "sh -c echo", argv: sh("echo hello"), out: "hello\n"},
		{name: "/bin/sh -c false", argv: []string{"/bin/sh", "-c", "false"}, code: 1},
		{name: "bash -c", argv: []string{"bash", "-c", "echo b"}, out: "b\n"},
		{name: "semicolons", argv: sh("echo a; echo b;echo c"), out: "a\nb\nc\n"},
		{name: "newlines", argv: sh("echo a\necho b\n"), out: "a\nb\n"},
		{name: "status of the last", argv: sh("false; true"), code: 0},
		{name: "trailing semicolon keeps status", argv: sh("false;"), code: 1},
		{name: "and stops", argv: sh("echo a && false && echo b"), out: "a\n", code: 1},
		{name: "or", argv: sh("false || echo fallback"), out: "fallback\n"},
		{name: "and-or", argv: sh("false && echo no || echo yes"), out: "yes\n"},
		{name: "exit stops the script", argv: sh("echo a; exit 4; echo b"), out: "a\n", code: 4},
		{name: "exit without N", argv: sh("false; exit"), code: 1},
		{name: "nested sh exit", argv: sh(`sh -c "exit 3"; echo $?`), out: "3\n"},
		{name: "single quotes", argv: sh(`echo 'a  b;c' "$HOSTNAME"`), out: "a  b;c web-0\n"},
		{name: "double quotes and escapes", argv: sh(`echo "x \"y\" \$HOME" a\ b`), out: "x \"y\" $HOME a b\n"},
		{name: "variables", argv: sh(`echo $GREETING ${HOSTNAME}!`), out: "hello world web-0!\n"},
		{name: "unset unquoted disappears", argv: sh(`echo $NOPE x`), out: "x\n"},
		{name: "empty quoted stays", argv: sh(`echo "" x`), out: " x\n"},
		{name: "status variable", argv: sh(`false; echo $?; true; echo $?`), out: "1\n0\n"},
		{name: "comment", argv: sh("echo a # echo b"), out: "a\n"},
		{name: "unknown in sh", argv: sh("nosuch arg"), err: "nosuch: command not found\n", code: 127},
		{name: "pipe unsupported", argv: sh("echo a | cat"), errContains: "not supported", code: 2},
		{name: "command substitution unsupported", argv: sh("echo $(hostname)"), errContains: "not supported", code: 2},
		{name: "unterminated quote", argv: sh(`echo "a`), errContains: "unterminated", code: 2},
		{name: "dangling and", argv: sh("echo a &&"), errContains: "syntax error", code: 2},
		{name: "sh -c without script", argv: []string{"sh", "-c"}, errContains: "requires an argument", code: 2},
		{name: "sh reads stdin", argv: []string{"sh"}, stdin: "echo one\r\nhostname\nexit 5\necho never\n", out: "one\nweb-0\n", code: 5},
		{name: "sh -c cat", argv: sh("cat"), stdin: "piped", out: "piped"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := runShell(t, context.Background(), c.stdin, c.argv...)
			if code != c.code {
				t.Errorf("exit code %d, want %d (stdout %q stderr %q)", code, c.code, out, errOut)
			}
			if out != c.out {
				t.Errorf("stdout %q, want %q", out, c.out)
			}
			if c.errContains != "" {
				if !strings.Contains(errOut, c.errContains) {
					t.Errorf("stderr %q does not contain %q", errOut, c.errContains)
				}
			} else if errOut != c.err {
				t.Errorf("stderr %q, want %q", errOut, c.err)
			}
		})
	}
}

// TestShellSleepIsInterruptible: a cancelled session ends sleep at once.
func TestShellSleepIsInterruptible(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	t0 := time.Now()
	_, _, code := runShell(t, ctx, "", "sh", "-c", "sleep 30; echo never")
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("sleep 30 took %v after cancellation", d)
	}
	if code != interruptedCode {
		t.Fatalf("exit code %d, want %d", code, interruptedCode)
	}
}

func TestParseSleep(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"1": time.Second, "0.5": 500 * time.Millisecond, "2s": 2 * time.Second, "1m": time.Minute, "1.5h": 90 * time.Minute,
	} {
		if got, err := parseSleep(in); err != nil || got != want {
			t.Errorf("parseSleep(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "-1", "1y"} {
		if _, err := parseSleep(in); err == nil {
			t.Errorf("parseSleep(%q) accepted", in)
		}
	}
}
