//! The built-in shell that `kubectl exec` reaches in a simulated container — the same
//! responder as testenv's fake kubelet (`testenv/internal/kubelet/shell.go`), so that a test
//! runs against either. Nothing is executed on the machine: a handful of commands are answered
//! in-process, from the pod's spec, and anything else is "command not found" (exit 127).
//!
//! ```text
//! echo [-n] ARGS…      ARGS joined by spaces (and a newline unless -n)
//! cat                  stdin to stdout until EOF (`cat FILE` says there is no such file)
//! hostname             the pod's name
//! env, printenv [NAME] the container's literal env values plus HOSTNAME
//! pwd                  /
//! true, false          exit 0, exit 1
//! exit [N]             stop with exit code N (default: the last command's)
//! sleep N              N seconds (fractions and s/m/h/d suffixes allowed); interrupted when
//!                      the session ends
//! sh -c SCRIPT         (also /bin/sh, bash, /bin/bash) runs SCRIPT: these commands separated
//!                      by `;`, `&&`, `||` or newlines, with '…' and "…" quoting, backslash
//!                      escapes, $NAME, ${NAME} and $? expansion and # comments
//! sh                   without -c: reads such lines from stdin until EOF or `exit`
//! ```
//!
//! A command named by path (/bin/echo, /usr/bin/env) is the same command. The shell blocks
//! (stdin, sleep): the exec session runs it on a blocking thread.

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// The exit code of a command cut short by the end of its session, as after SIGINT.
pub const INTERRUPTED: i32 = 130;

/// Ends a running shell's `sleep` and its scripts when the session goes away. Clones share it.
#[derive(Clone, Default)]
pub struct Interrupt(Arc<(Mutex<bool>, Condvar)>);

impl Interrupt {
    pub fn interrupt(&self) {
        *self.0.0.lock() = true;
        self.0.1.notify_all();
    }

    pub fn is_set(&self) -> bool {
        *self.0.0.lock()
    }

    /// Wait `d`; false when interrupted first.
    fn sleep(&self, d: Duration) -> bool {
        let deadline = Instant::now().checked_add(d);
        let mut set = self.0.0.lock();
        while !*set {
            match deadline {
                Some(at) => {
                    if self.0.1.wait_until(&mut set, at).timed_out() {
                        return !*set;
                    }
                }
                None => self.0.1.wait(&mut set),
            }
        }
        false
    }
}

/// The shell of one exec session.
pub struct Shell {
    hostname: String,
    /// In order; HOSTNAME first.
    env: Vec<(String, String)>,
    stdin: Box<dyn BufRead + Send>,
    stdout: Box<dyn Write + Send>,
    stderr: Box<dyn Write + Send>,
    interrupt: Interrupt,
    /// `$?`
    status: i32,
}

impl Shell {
    /// A shell for the pod `hostname` with the container's literal `env` values.
    pub fn new(
        hostname: &str,
        env: &[(String, String)],
        stdin: Box<dyn BufRead + Send>,
        stdout: Box<dyn Write + Send>,
        stderr: Box<dyn Write + Send>,
        interrupt: Interrupt,
    ) -> Shell {
        let mut vars = vec![("HOSTNAME".to_string(), hostname.to_string())];
        for (name, value) in env {
            match vars.iter_mut().find(|(n, _)| n == name) {
                Some(v) => v.1 = value.clone(),
                None => vars.push((name.clone(), value.clone())),
            }
        }
        Shell { hostname: hostname.to_string(), env: vars, stdin, stdout, stderr, interrupt, status: 0 }
    }

    fn lookup(&self, name: &str) -> Option<&str> {
        self.env.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// Run one command line (argv as exec passes it) and return its exit code.
    pub fn run(&mut self, argv: &[String]) -> i32 {
        let code = self.command(argv).0;
        let _ = self.stdout.flush();
        let _ = self.stderr.flush();
        code
    }

    // Writes to a client that went away fail; the command goes on regardless, as a process
    // whose terminal closed would until it is interrupted.
    fn out(&mut self, s: &str) {
        let _ = self.stdout.write_all(s.as_bytes());
    }

    fn err(&mut self, s: &str) {
        let _ = self.stderr.write_all(s.as_bytes());
    }

    /// Run one simple command: its exit code, and whether the script must stop (`exit`).
    fn command(&mut self, argv: &[String]) -> (i32, bool) {
        let Some(first) = argv.first() else { return (0, false) };
        let mut name = first.as_str();
        if let Some((dir, base)) = name.rsplit_once('/')
            && matches!(dir, "/bin" | "/usr/bin" | "/sbin" | "/usr/sbin" | "/usr/local/bin")
        {
            name = base;
        }
        let args = &argv[1..];
        match name {
            "echo" => {
                let (newline, args) = match args.first() {
                    Some(a) if a == "-n" => (false, &args[1..]),
                    _ => (true, args),
                };
                let mut out = args.join(" ");
                if newline {
                    out.push('\n');
                }
                self.out(&out);
                (0, false)
            }
            "cat" => (self.cat(args), false),
            "hostname" => {
                let h = format!("{}\n", self.hostname);
                self.out(&h);
                (0, false)
            }
            "env" => {
                if !args.is_empty() {
                    self.err("env: flotilla-sim shell: env takes no arguments\n");
                    return (125, false);
                }
                let all: String = self.env.iter().map(|(n, v)| format!("{n}={v}\n")).collect();
                self.out(&all);
                (0, false)
            }
            "printenv" => {
                if args.is_empty() {
                    return self.command(&["env".to_string()]);
                }
                let mut code = 0;
                for a in args {
                    match self.lookup(a).map(|v| format!("{v}\n")) {
                        Some(v) => self.out(&v),
                        None => code = 1,
                    }
                }
                (code, false)
            }
            "pwd" => {
                self.out("/\n");
                (0, false)
            }
            "true" | ":" => (0, false),
            "false" => (1, false),
            "exit" => {
                let Some(a) = args.first() else { return (self.status, true) };
                match a.parse::<i64>() {
                    Ok(n) if n >= 0 => ((n & 0xff) as i32, true),
                    _ => {
                        self.err(&format!("sh: exit: Illegal number: {a}\n"));
                        (2, true)
                    }
                }
            }
            "sleep" => (self.sleep(args), false),
            "sh" | "bash" => (self.sh(args), false),
            _ => {
                self.err(&format!("{first}: command not found\n"));
                (127, false)
            }
        }
    }

    fn cat(&mut self, args: &[String]) -> i32 {
        let dash = ["-".to_string()];
        let args = if args.is_empty() { &dash[..] } else { args };
        let mut code = 0;
        for a in args {
            if a != "-" {
                self.err(&format!("cat: {a}: No such file or directory\n"));
                code = 1;
                continue;
            }
            loop {
                let chunk = match self.stdin.fill_buf() {
                    Ok([]) => break,
                    Ok(b) => b.to_vec(),
                    Err(e) => {
                        self.err(&format!("cat: -: {e}\n"));
                        return 1;
                    }
                };
                self.stdin.consume(chunk.len());
                if self.stdout.write_all(&chunk).and_then(|()| self.stdout.flush()).is_err() {
                    return 1;
                }
            }
        }
        code
    }

    fn sleep(&mut self, args: &[String]) -> i32 {
        if args.is_empty() {
            self.err("sleep: missing operand\n");
            return 1;
        }
        let mut total = Duration::ZERO;
        for a in args {
            match parse_sleep(a) {
                Some(d) => total = total.saturating_add(d),
                None => {
                    self.err(&format!("sleep: invalid time interval '{a}'\n"));
                    return 1;
                }
            }
        }
        if self.interrupt.sleep(total) { 0 } else { INTERRUPTED }
    }

    /// `sh -c SCRIPT [NAME ARGS…]`, or script lines read from stdin without -c.
    fn sh(&mut self, args: &[String]) -> i32 {
        match args.first().map(String::as_str) {
            Some("-c") => {
                let Some(script) = args.get(1) else {
                    self.err("sh: -c: option requires an argument\n");
                    return 2;
                };
                return self.script(script).0;
            }
            Some("-s" | "-") | None => {}
            Some(file) => {
                self.err(&format!("sh: 0: cannot open {file}: No such file\n"));
                return 2;
            }
        }
        // Commands from stdin, one line at a time (a raw terminal ends lines with \r).
        let mut code = 0;
        while let Some(line) = self.read_line() {
            let (c, exit) = self.script(&line);
            code = c;
            if exit {
                return code;
            }
            if self.interrupt.is_set() {
                return INTERRUPTED;
            }
        }
        code
    }

    /// The next line of stdin (ended by \n or \r), None at EOF.
    fn read_line(&mut self) -> Option<String> {
        let mut line = Vec::new();
        loop {
            let buf = match self.stdin.fill_buf() {
                Ok(b) => b,
                Err(_) => &[],
            };
            if buf.is_empty() {
                return (!line.is_empty()).then(|| String::from_utf8_lossy(&line).into_owned());
            }
            if let Some(i) = buf.iter().position(|&b| b == b'\n' || b == b'\r') {
                line.extend_from_slice(&buf[..i]);
                self.stdin.consume(i + 1);
                return Some(String::from_utf8_lossy(&line).into_owned());
            }
            line.extend_from_slice(buf);
            let n = buf.len();
            self.stdin.consume(n);
        }
    }

    /// Run a command list: its status, and whether it ended with `exit` (which ends an
    /// enclosing sh too).
    fn script(&mut self, src: &str) -> (i32, bool) {
        let cmds = match parse(src) {
            Ok(c) => c,
            Err(e) => {
                self.err(&format!("sh: {e}\n"));
                self.status = 2;
                return (2, false);
            }
        };
        let mut skip = false;
        for c in &cmds {
            if !skip {
                if self.interrupt.is_set() {
                    self.status = INTERRUPTED;
                    return (INTERRUPTED, true);
                }
                let argv: Vec<String> = c.words.iter().filter_map(|w| w.expand(self)).collect();
                let (code, exit) = self.command(&argv);
                self.status = code;
                if exit {
                    return (code, true);
                }
            }
            // Whether the next command runs depends on the operator after this one.
            skip = match c.next {
                Next::And => self.status != 0,
                Next::Or => self.status == 0,
                Next::Then => false,
            };
        }
        (self.status, false)
    }
}

/// `sleep`'s operand: a non-negative number of seconds, or of minutes, hours or days with an
/// m, h or d suffix.
pub fn parse_sleep(a: &str) -> Option<Duration> {
    let (num, unit) = match a.as_bytes().last() {
        Some(b's') => (&a[..a.len() - 1], 1.0),
        Some(b'm') => (&a[..a.len() - 1], 60.0),
        Some(b'h') => (&a[..a.len() - 1], 3600.0),
        Some(b'd') => (&a[..a.len() - 1], 86400.0),
        _ => (a, 1.0),
    };
    let f: f64 = num.parse().ok()?;
    if !(0.0..=1e9).contains(&f) {
        return None;
    }
    Duration::try_from_secs_f64(f * unit).ok()
}

/// The operator after a simple command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    /// `;`, a newline or the end
    Then,
    And,
    Or,
}

/// A parsed simple command.
#[derive(Debug)]
struct Command {
    words: Vec<Word>,
    next: Next,
}

/// A word: text and expansions, resolved when the command runs, so that `false; echo $?`
/// sees the status of `false`.
#[derive(Debug, Default)]
struct Word {
    parts: Vec<Part>,
    /// Any quoting: an empty result is still an (empty) argument.
    quoted: bool,
}

#[derive(Debug)]
enum Part {
    Text(String),
    /// `$NAME`, `${NAME}`, `$?`
    Var(String),
}

impl Word {
    fn expand(&self, s: &Shell) -> Option<String> {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Var(v) if v == "?" => out.push_str(&s.status.to_string()),
                Part::Var(v) => out.push_str(s.lookup(v).unwrap_or("")),
            }
        }
        (self.quoted || !out.is_empty()).then_some(out)
    }
}

/// The parser's state: the commands so far, the one being read, its word being read.
#[derive(Default)]
struct Parser {
    cmds: Vec<Command>,
    words: Vec<Word>,
    word: Word,
    in_word: bool,
    text: Vec<u8>,
}

impl Parser {
    fn flush_text(&mut self) {
        if !self.text.is_empty() {
            let t = String::from_utf8_lossy(&std::mem::take(&mut self.text)).into_owned();
            self.word.parts.push(Part::Text(t));
        }
    }

    fn end_word(&mut self) {
        self.flush_text();
        let w = std::mem::take(&mut self.word);
        if self.in_word {
            self.words.push(w);
        }
        self.in_word = false;
    }

    fn end_command(&mut self, next: Next) {
        self.end_word();
        if !self.words.is_empty() {
            self.cmds.push(Command { words: std::mem::take(&mut self.words), next });
        }
    }

    /// `$NAME`, `${NAME}` or `$?` at `src[i] == b'$'`: the index after it.
    fn variable(&mut self, src: &[u8], i: usize) -> Result<usize, String> {
        let j = i + 1;
        match src.get(j) {
            Some(b'?') => {
                self.flush_text();
                self.word.parts.push(Part::Var("?".into()));
                return Ok(j + 1);
            }
            Some(b'{') => {
                let Some(end) = src[j..].iter().position(|&b| b == b'}') else { return Err("bad substitution".into()) };
                self.flush_text();
                self.word.parts.push(Part::Var(String::from_utf8_lossy(&src[j + 1..j + end]).into_owned()));
                return Ok(j + end + 1);
            }
            Some(b'(') => return Err("flotilla-sim shell: command substitution $(…) is not supported".into()),
            _ => {}
        }
        let k = j + src[j..].iter().take_while(|&&b| b == b'_' || b.is_ascii_alphanumeric()).count();
        if k == j {
            self.text.push(b'$'); // a lone $
            return Ok(j);
        }
        self.flush_text();
        self.word.parts.push(Part::Var(String::from_utf8_lossy(&src[j..k]).into_owned()));
        Ok(k)
    }
}

/// Split a script into simple commands (whitespace and quotes; no pipes, redirections or
/// substitutions).
fn parse(script: &str) -> Result<Vec<Command>, String> {
    let src = script.as_bytes();
    let mut p = Parser::default();
    let mut i = 0;
    while i < src.len() {
        let c = src[i];
        let pair = src.get(i + 1) == Some(&c);
        match c {
            b' ' | b'\t' => {
                p.end_word();
                i += 1;
            }
            b'\n' | b';' => {
                p.end_command(Next::Then);
                i += 1;
            }
            b'&' | b'|' if pair => {
                if !p.in_word && p.words.is_empty() {
                    return Err(format!("syntax error: {:?} unexpected", &script[i..i + 2]));
                }
                p.end_command(if c == b'&' { Next::And } else { Next::Or });
                i += 2;
            }
            b'|' | b'&' | b'<' | b'>' | b'`' | b'(' | b')' => {
                return Err(format!("flotilla-sim shell: {:?} is not supported (only commands separated by ;, && and ||)", char::from(c).to_string()));
            }
            b'#' if !p.in_word => {
                while i < src.len() && src[i] != b'\n' {
                    i += 1;
                }
            }
            b'\\' => {
                p.in_word = true;
                match src.get(i + 1) {
                    Some(&n) => {
                        if n != b'\n' {
                            p.text.push(n);
                        }
                        i += 2;
                    }
                    None => {
                        p.text.push(b'\\');
                        i += 1;
                    }
                }
            }
            b'\'' => {
                let Some(end) = src[i + 1..].iter().position(|&b| b == b'\'') else {
                    return Err("syntax error: unterminated quoted string".into());
                };
                p.in_word = true;
                p.word.quoted = true;
                p.text.extend_from_slice(&src[i + 1..i + 1 + end]);
                i += end + 2;
            }
            b'"' => {
                p.in_word = true;
                p.word.quoted = true;
                i += 1;
                let mut closed = false;
                while i < src.len() && !closed {
                    match src[i] {
                        b'"' => {
                            closed = true;
                            i += 1;
                        }
                        b'\\' if src.get(i + 1).is_some_and(|n| b"\"\\$`\n".contains(n)) => {
                            if src[i + 1] != b'\n' {
                                p.text.push(src[i + 1]);
                            }
                            i += 2;
                        }
                        b'$' => i = p.variable(src, i)?,
                        d => {
                            p.text.push(d);
                            i += 1;
                        }
                    }
                }
                if !closed {
                    return Err("syntax error: unterminated quoted string".into());
                }
            }
            b'$' => {
                p.in_word = true;
                i = p.variable(src, i)?;
            }
            _ => {
                p.in_word = true;
                p.text.push(c);
                i += 1;
            }
        }
    }
    p.end_command(Next::Then);
    if p.cmds.last().is_some_and(|c| c.next != Next::Then) {
        return Err("syntax error: end of file unexpected".into());
    }
    Ok(p.cmds)
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;

    /// A writer tests read back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock()).into_owned()
        }
    }

    /// Run argv with this stdin: exit code, stdout, stderr.
    fn run(argv: &[&str], stdin: &str) -> (i32, String, String) {
        let (out, err) = (Captured::default(), Captured::default());
        let env = [("GREETING".to_string(), "hello world".to_string()), ("HOSTNAME".to_string(), "renamed".to_string())];
        let mut sh =
            Shell::new("web-0", &env, Box::new(Cursor::new(stdin.as_bytes().to_vec())), Box::new(out.clone()), Box::new(err.clone()), Interrupt::default());
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let code = sh.run(&argv);
        (code, out.text(), err.text())
    }

    fn sh_c(script: &str) -> (i32, String, String) {
        run(&["sh", "-c", script], "")
    }

    #[test]
    fn simple_commands_answer_from_the_pod() {
        assert_eq!(run(&["echo", "hi", "there"], ""), (0, "hi there\n".into(), String::new()));
        assert_eq!(run(&["/bin/echo", "-n", "x"], ""), (0, "x".into(), String::new()));
        assert_eq!(run(&["hostname"], ""), (0, "web-0\n".into(), String::new()));
        assert_eq!(run(&["env"], "").1, "HOSTNAME=renamed\nGREETING=hello world\n", "the container's HOSTNAME replaces the pod's");
        assert_eq!(run(&["/usr/bin/printenv", "GREETING", "NOPE"], ""), (1, "hello world\n".into(), String::new()));
        assert_eq!(run(&["printenv"], "").1, run(&["env"], "").1);
        assert_eq!(run(&["env", "x"], "").0, 125);
        assert_eq!(run(&["pwd"], "").1, "/\n");
        assert_eq!(run(&["true"], "").0, 0);
        assert_eq!(run(&["false"], "").0, 1);
        assert_eq!(run(&["ls", "/"], ""), (127, String::new(), "ls: command not found\n".into()));
        assert_eq!(run(&["/opt/echo", "x"], "").0, 127, "only the usual directories name the built-ins");
        assert_eq!(run(&[], "").0, 0);
    }

    #[test]
    fn cat_copies_stdin_and_knows_no_files() {
        assert_eq!(run(&["cat"], "piped\nthrough"), (0, "piped\nthrough".into(), String::new()));
        assert_eq!(run(&["cat", "-"], "x"), (0, "x".into(), String::new()));
        assert_eq!(run(&["cat", "/etc/hosts"], ""), (1, String::new(), "cat: /etc/hosts: No such file or directory\n".into()));
    }

    #[test]
    fn exit_codes() {
        assert_eq!(run(&["exit", "3"], "").0, 3);
        assert_eq!(run(&["exit", "257"], "").0, 1);
        assert_eq!(run(&["exit", "x"], ""), (2, String::new(), "sh: exit: Illegal number: x\n".into()));
        assert_eq!(sh_c("exit 3").0, 3);
        assert_eq!(sh_c("echo spdy; exit 3"), (3, "spdy\n".into(), String::new()));
        assert_eq!(sh_c("false; exit").0, 1, "exit alone keeps the last status");
        assert_eq!(sh_c("exit 4; echo never"), (4, String::new(), String::new()));
        assert_eq!(run(&["bash", "-c", "sh -c 'exit 5'; echo $?"], "").1, "5\n", "a nested sh's exit ends only it");
    }

    #[test]
    fn scripts_quote_expand_and_chain() {
        assert_eq!(sh_c("echo \"$GREETING\" '$GREETING' ${HOSTNAME}x \\$").1, "hello world $GREETING renamedx $\n");
        assert_eq!(sh_c("false; echo $?; true && echo and || echo or; false || echo or2 && echo and2").1, "1\nand\nor2\nand2\n");
        assert_eq!(sh_c("false && echo no; echo $?").1, "1\n", "a skipped command leaves the status");
        assert_eq!(sh_c("echo a # a comment\necho b").1, "a\nb\n");
        assert_eq!(sh_c("echo '' \"\" $NOPE x").1, "  x\n", "quoted empties are arguments, an empty expansion is not");
        assert_eq!(sh_c("echo \"a\\\"b\" c\\ d").1, "a\"b c d\n");
        assert_eq!(sh_c("echo $ $1x").1, "$\n", "a lone $ is text, $1x an (empty) variable");
    }

    #[test]
    fn unsupported_syntax_is_an_error() {
        assert_eq!(
            sh_c("echo a | cat"),
            (2, String::new(), "sh: flotilla-sim shell: \"|\" is not supported (only commands separated by ;, && and ||)\n".into())
        );
        assert_eq!(sh_c("echo $(date)").2, "sh: flotilla-sim shell: command substitution $(…) is not supported\n");
        assert_eq!(sh_c("echo 'open").2, "sh: syntax error: unterminated quoted string\n");
        assert_eq!(sh_c("&& echo").2, "sh: syntax error: \"&&\" unexpected\n");
        assert_eq!(sh_c("echo a &&").2, "sh: syntax error: end of file unexpected\n");
        assert_eq!(sh_c("echo ${x").2, "sh: bad substitution\n");
        assert_eq!(run(&["sh", "-c"], ""), (2, String::new(), "sh: -c: option requires an argument\n".into()));
        assert_eq!(run(&["sh", "script.sh"], "").2, "sh: 0: cannot open script.sh: No such file\n");
    }

    #[test]
    fn sh_reads_commands_from_stdin() {
        assert_eq!(run(&["sh"], "echo one\r\necho two\nexit 7\necho never\n"), (7, "one\ntwo\n".into(), String::new()));
        assert_eq!(run(&["/bin/bash", "-s"], "false"), (1, String::new(), String::new()));
    }

    #[test]
    fn sleep_parses_its_operand_and_ends_when_interrupted() {
        assert_eq!(parse_sleep("1.5"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_sleep("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_sleep("1d"), Some(Duration::from_secs(86400)));
        assert_eq!(parse_sleep("-1"), None);
        assert_eq!(parse_sleep("x"), None);
        assert_eq!(run(&["sleep", "0"], "").0, 0);
        assert_eq!(run(&["sleep"], "").2, "sleep: missing operand\n");
        assert_eq!(run(&["sleep", "soon"], ""), (1, String::new(), "sleep: invalid time interval 'soon'\n".into()));
        let interrupt = Interrupt::default();
        let i = interrupt.clone();
        let t = std::thread::spawn(move || {
            let mut sh = Shell::new("p", &[], Box::new(Cursor::new(Vec::new())), Box::new(std::io::sink()), Box::new(std::io::sink()), i);
            sh.run(&["sh".into(), "-c".into(), "sleep 1h; echo never".into()])
        });
        interrupt.interrupt();
        assert_eq!(t.join().unwrap(), INTERRUPTED);
    }
}
