package kubelet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"time"
)

// shell is the built-in responder that `kubectl exec` reaches on a fake node. Nothing is
// executed on the machine: a handful of commands are answered in-process, from the pod's
// spec, and anything else is "command not found" (exit 127), as a shell would say.
//
//	echo [-n] ARGS…      ARGS joined by spaces (and a newline unless -n)
//	cat                  stdin to stdout until EOF (`cat FILE` says there is no such file)
//	hostname             the pod's name
//	env, printenv [NAME] the container's literal env values plus HOSTNAME
//	pwd                  /
//	true, false          exit 0, exit 1
//	exit [N]             stop with exit code N (default: the last command's)
//	sleep N              N seconds (fractions and s/m/h suffixes allowed); interrupted
//	                     when the client goes away, the pod is deleted or the kubelet stops
//	sh -c SCRIPT         (also /bin/sh, bash, /bin/bash) runs SCRIPT: these commands
//	                     separated by `;`, `&&`, `||` or newlines, with '…' and "…" quoting,
//	                     backslash escapes, $NAME, ${NAME} and $? expansion and # comments
//	sh                   without -c: reads such lines from stdin until EOF or `exit`
//
// A command named by path (/bin/echo, /usr/bin/env) is the same command.
type shell struct {
	ctx      context.Context
	hostname string
	env      []envVar // in order; HOSTNAME first
	stdin    io.Reader
	stdout   io.Writer
	stderr   io.Writer
	status   int // $?
}

type envVar struct{ name, value string }

// errInterrupted ends a command when ctx is done; exit code 130 as after SIGINT.
const interruptedCode = 130

func newShell(ctx context.Context, hostname string, env []envVar, stdin io.Reader, stdout, stderr io.Writer) *shell {
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	vars := []envVar{{"HOSTNAME", hostname}}
	for _, e := range env {
		replaced := false
		for i := range vars {
			if vars[i].name == e.name {
				vars[i].value, replaced = e.value, true
			}
		}
		if !replaced {
			vars = append(vars, e)
		}
	}
	return &shell{ctx: ctx, hostname: hostname, env: vars, stdin: stdin, stdout: stdout, stderr: stderr}
}

func (s *shell) lookup(name string) (string, bool) {
	for _, e := range s.env {
		if e.name == name {
			return e.value, true
		}
	}
	return "", false
}

// Run runs one command line (argv as exec passes it) and returns its exit code.
func (s *shell) Run(argv []string) int {
	code, _ := s.command(argv)
	return code
}

// command runs one simple command; exit reports that the script must stop (`exit`).
func (s *shell) command(argv []string) (code int, exit bool) {
	if len(argv) == 0 {
		return 0, false
	}
	name := argv[0]
	if strings.Contains(name, "/") {
		switch path.Dir(name) {
		case "/bin", "/usr/bin", "/sbin", "/usr/sbin", "/usr/local/bin":
			name = path.Base(name)
		}
	}
	args := argv[1:]
	switch name {
	case "echo":
		newline := true
		if len(args) > 0 && args[0] == "-n" {
			newline, args = false, args[1:]
		}
		out := strings.Join(args, " ")
		if newline {
			out += "\n"
		}
		io.WriteString(s.stdout, out)
		return 0, false
	case "cat":
		code := 0
		if len(args) == 0 {
			args = []string{"-"}
		}
		for _, a := range args {
			if a != "-" {
				fmt.Fprintf(s.stderr, "cat: %s: No such file or directory\n", a)
				code = 1
				continue
			}
			if _, err := io.Copy(s.stdout, s.stdin); err != nil && !errors.Is(err, io.EOF) {
				fmt.Fprintf(s.stderr, "cat: -: %v\n", err)
				return 1, false
			}
		}
		return code, false
	case "hostname":
		fmt.Fprintln(s.stdout, s.hostname)
		return 0, false
	case "env":
		if len(args) > 0 {
			fmt.Fprintln(s.stderr, "env: testenv fake shell: env takes no arguments")
			return 125, false
		}
		for _, e := range s.env {
			fmt.Fprintf(s.stdout, "%s=%s\n", e.name, e.value)
		}
		return 0, false
	case "printenv":
		if len(args) == 0 {
			return s.command([]string{"env"})
		}
		code := 0
		for _, a := range args {
			if v, ok := s.lookup(a); ok {
				fmt.Fprintln(s.stdout, v)
			} else {
				code = 1
			}
		}
		return code, false
	case "pwd":
		fmt.Fprintln(s.stdout, "/")
		return 0, false
	case "true", ":":
		return 0, false
	case "false":
		return 1, false
	case "exit":
		if len(args) == 0 {
			return s.status, true
		}
		n, err := strconv.Atoi(args[0])
		if err != nil || n < 0 {
			fmt.Fprintf(s.stderr, "sh: exit: Illegal number: %s\n", args[0])
			return 2, true
		}
		return n & 0xff, true
	case "sleep":
		return s.sleep(args), false
	case "sh", "bash":
		return s.sh(args), false
	}
	fmt.Fprintf(s.stderr, "%s: command not found\n", argv[0])
	return 127, false
}

func (s *shell) sleep(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(s.stderr, "sleep: missing operand")
		return 1
	}
	var total time.Duration
	for _, a := range args {
		d, err := parseSleep(a)
		if err != nil {
			fmt.Fprintf(s.stderr, "sleep: invalid time interval '%s'\n", a)
			return 1
		}
		total += d
	}
	t := time.NewTimer(total)
	defer t.Stop()
	select {
	case <-t.C:
		return 0
	case <-s.ctx.Done():
		return interruptedCode
	}
}

func parseSleep(a string) (time.Duration, error) {
	unit := time.Second
	num := a
	if n := len(a); n > 0 {
		switch a[n-1] {
		case 's':
			num = a[:n-1]
		case 'm':
			unit, num = time.Minute, a[:n-1]
		case 'h':
			unit, num = time.Hour, a[:n-1]
		case 'd':
			unit, num = 24*time.Hour, a[:n-1]
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 || f > 1e9 {
		return 0, fmt.Errorf("invalid interval %q", a)
	}
	return time.Duration(f * float64(unit)), nil
}

// sh runs `sh -c SCRIPT [NAME ARGS…]`, or reads script lines from stdin without -c.
func (s *shell) sh(args []string) int {
	if len(args) > 0 && args[0] == "-c" {
		if len(args) < 2 {
			fmt.Fprintln(s.stderr, "sh: -c: option requires an argument")
			return 2
		}
		code, _ := s.script(args[1])
		return code
	}
	if len(args) > 0 && args[0] != "-s" && args[0] != "-" {
		fmt.Fprintf(s.stderr, "sh: 0: cannot open %s: No such file\n", args[0])
		return 2
	}
	// Commands from stdin, one line at a time (a raw terminal ends lines with \r).
	sc := bufio.NewScanner(s.stdin)
	sc.Split(scanLinesCRLF)
	code := 0
	for sc.Scan() {
		var exit bool
		if code, exit = s.script(sc.Text()); exit {
			return code
		}
		if s.ctx.Err() != nil {
			return interruptedCode
		}
	}
	return code
}

func scanLinesCRLF(data []byte, atEOF bool) (int, []byte, error) {
	for i, b := range data {
		if b == '\n' || b == '\r' {
			return i + 1, data[:i], nil
		}
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// script runs a command list; exit reports an `exit` (which ends an enclosing sh too).
func (s *shell) script(src string) (code int, exit bool) {
	cmds, err := s.parse(src)
	if err != nil {
		fmt.Fprintf(s.stderr, "sh: %v\n", err)
		s.status = 2
		return 2, false
	}
	code = s.status
	skip := false
	for _, c := range cmds {
		if !skip {
			if s.ctx.Err() != nil {
				s.status = interruptedCode
				return interruptedCode, true
			}
			argv := make([]string, 0, len(c.words))
			for _, w := range c.words {
				if v, keep := w.expand(s); keep {
					argv = append(argv, v)
				}
			}
			code, exit = s.command(argv)
			s.status = code
			if exit {
				return code, true
			}
		}
		// Whether the next command runs depends on the operator after this one.
		switch c.next {
		case "&&":
			skip = s.status != 0
		case "||":
			skip = s.status == 0
		default:
			skip = false
		}
	}
	return s.status, false
}

// A parsed simple command: words and the operator that follows it ("", ";", "&&", "||").
type parsedCommand struct {
	words []word
	next  string
}

// A word is a sequence of parts; expansions are resolved when the command runs, so that
// `false; echo $?` sees the status of `false`.
type word struct {
	parts  []wordPart
	quoted bool // any quoting: an empty result is still an (empty) argument
}

type wordPart struct {
	text string
	vr   string // variable name when this part is an expansion
}

func (w word) expand(s *shell) (string, bool) {
	var b strings.Builder
	for _, p := range w.parts {
		if p.vr == "" {
			b.WriteString(p.text)
			continue
		}
		if p.vr == "?" {
			b.WriteString(strconv.Itoa(s.status))
			continue
		}
		v, _ := s.lookup(p.vr)
		b.WriteString(v)
	}
	return b.String(), w.quoted || b.Len() > 0
}

// parse splits a script into simple commands (simple whitespace/quote splitting, no
// pipes, redirections or substitutions).
func (s *shell) parse(src string) ([]parsedCommand, error) {
	var (
		cmds   []parsedCommand
		cur    parsedCommand
		w      word
		inWord bool
		text   strings.Builder
	)
	flushText := func() {
		if text.Len() > 0 {
			w.parts = append(w.parts, wordPart{text: text.String()})
			text.Reset()
		}
	}
	endWord := func() {
		flushText()
		if inWord {
			cur.words = append(cur.words, w)
		}
		w, inWord = word{}, false
	}
	endCommand := func(op string) {
		endWord()
		if len(cur.words) > 0 {
			cur.next = op
			cmds = append(cmds, cur)
		}
		cur = parsedCommand{}
	}
	// variable reads $NAME, ${NAME} or $? at src[i] == '$'; it returns the index after it.
	variable := func(i int) (int, error) {
		j := i + 1
		switch {
		case j < len(src) && src[j] == '?':
			flushText()
			w.parts = append(w.parts, wordPart{vr: "?"})
			return j + 1, nil
		case j < len(src) && src[j] == '{':
			end := strings.IndexByte(src[j:], '}')
			if end < 0 {
				return 0, errors.New("bad substitution")
			}
			flushText()
			w.parts = append(w.parts, wordPart{vr: src[j+1 : j+end]})
			return j + end + 1, nil
		case j < len(src) && src[j] == '(':
			return 0, errors.New("testenv fake shell: command substitution $(…) is not supported")
		}
		k := j
		for k < len(src) && (src[k] == '_' || isAlnum(src[k])) {
			k++
		}
		if k == j {
			text.WriteByte('$') // a lone $
			return j, nil
		}
		flushText()
		w.parts = append(w.parts, wordPart{vr: src[j:k]})
		return k, nil
	}
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t':
			endWord()
			i++
		case c == '\n' || c == ';':
			endCommand(";")
			i++
		case c == '&' && i+1 < len(src) && src[i+1] == '&', c == '|' && i+1 < len(src) && src[i+1] == '|':
			if !inWord && len(cur.words) == 0 {
				return nil, fmt.Errorf("syntax error: %q unexpected", src[i:i+2])
			}
			endCommand(src[i : i+2])
			i += 2
		case c == '|' || c == '&' || c == '<' || c == '>' || c == '`' || c == '(' || c == ')':
			return nil, fmt.Errorf("testenv fake shell: %q is not supported (only commands separated by ;, && and ||)", string(c))
		case c == '#' && !inWord:
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '\\':
			inWord = true
			if i+1 < len(src) {
				if src[i+1] != '\n' {
					text.WriteByte(src[i+1])
				}
				i += 2
			} else {
				text.WriteByte('\\')
				i++
			}
		case c == '\'':
			end := strings.IndexByte(src[i+1:], '\'')
			if end < 0 {
				return nil, errors.New("syntax error: unterminated quoted string")
			}
			inWord, w.quoted = true, true
			text.WriteString(src[i+1 : i+1+end])
			i += end + 2
		case c == '"':
			inWord, w.quoted = true, true
			i++
			closed := false
			for i < len(src) && !closed {
				switch d := src[i]; {
				case d == '"':
					closed = true
					i++
				case d == '\\' && i+1 < len(src) && strings.IndexByte("\"\\$`\n", src[i+1]) >= 0:
					if src[i+1] != '\n' {
						text.WriteByte(src[i+1])
					}
					i += 2
				case d == '$':
					var err error
					if i, err = variable(i); err != nil {
						return nil, err
					}
				default:
					text.WriteByte(d)
					i++
				}
			}
			if !closed {
				return nil, errors.New("syntax error: unterminated quoted string")
			}
		case c == '$':
			inWord = true
			var err error
			if i, err = variable(i); err != nil {
				return nil, err
			}
		default:
			inWord = true
			text.WriteByte(c)
			i++
		}
	}
	endCommand("")
	if n := len(cmds); n > 0 && (cmds[n-1].next == "&&" || cmds[n-1].next == "||") {
		return nil, errors.New("syntax error: end of file unexpected")
	}
	return cmds, nil
}

func isAlnum(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}
