//! `pods/log` of a simulated container: the options (`v1.PodLogOptions` as the query carries
//! them) and the lines, the same deterministic fake lines as testenv's fake kubelet
//! (`testenv/internal/kubelet/logs.go`) — three written when the container started, then, with
//! `follow`, one a second while the stream is open and the pod runs.

use std::time::Duration;

use bytes::Bytes;
use flotilla_apiserver::connect::ConnectBody;
use futures::StreamExt;
use futures::future::BoxFuture;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

use super::Query;

/// How many lines a container has logged when it is first asked for its logs.
const STATIC_LINES: usize = 3;

/// How often a followed container writes a line.
pub const FOLLOW_EVERY: Duration = Duration::from_secs(1);

/// Which of a container's output streams to return (`stream`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogStream {
    All,
    Stdout,
    Stderr,
}

/// The query of a `pods/log` request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogOptions {
    pub container: String,
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    /// Lines written before this are left out.
    pub since: Option<Timestamp>,
    pub tail_lines: Option<u64>,
    pub limit_bytes: Option<u64>,
    pub stream: LogStream,
}

/// A boolean option as the kubelet reads one (Go's `strconv.ParseBool`); absent is false.
fn boolean(q: &Query, name: &str) -> Result<bool, String> {
    match q.get(name).unwrap_or("") {
        "" => Ok(false),
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        v => Err(format!("{name}={v:?}: not a boolean")),
    }
}

/// An integer option of at least `min`.
fn integer(q: &Query, name: &str, min: i64) -> Result<Option<i64>, String> {
    let Some(v) = q.get(name).filter(|v| !v.is_empty()) else { return Ok(None) };
    match v.parse::<i64>() {
        Ok(n) if n >= min => Ok(Some(n)),
        _ => Err(format!("{name}={v:?}: want an integer >= {min}")),
    }
}

impl LogOptions {
    /// Read the options (plus the legacy `tail`) as the kubelet does; the error is the message
    /// of a 400.
    pub fn parse(q: &Query, now: Timestamp) -> Result<LogOptions, String> {
        let follow = boolean(q, "follow")?;
        let previous = boolean(q, "previous")?;
        let timestamps = boolean(q, "timestamps")?;
        let tail_lines = match q.get("tail") {
            Some(t) if !t.is_empty() && t != "all" && q.get("tailLines").is_none_or(str::is_empty) => {
                integer(&Query::from_pairs([("tailLines", t)]), "tailLines", 0)?
            }
            _ => integer(q, "tailLines", 0)?,
        };
        let limit_bytes = integer(q, "limitBytes", 1)?;
        let since_seconds = integer(q, "sinceSeconds", 1)?;
        let since = match (q.get("sinceTime").filter(|s| !s.is_empty()), since_seconds) {
            (Some(_), Some(_)) => return Err("at most one of sinceTime or sinceSeconds may be specified".into()),
            (Some(t), None) => Some(t.parse::<Timestamp>().map_err(|_| format!("sinceTime={t:?}: not an RFC3339 time"))?),
            (None, Some(s)) => Some(now - jiff::SignedDuration::from_secs(s)),
            (None, None) => None,
        };
        let stream = match q.get("stream").unwrap_or("") {
            "" | "All" => LogStream::All,
            "Stdout" => LogStream::Stdout,
            "Stderr" => LogStream::Stderr,
            s => return Err(format!("invalid stream type {s:?}")),
        };
        Ok(LogOptions {
            container: q.get("container").unwrap_or("").to_string(),
            follow,
            previous,
            timestamps,
            since,
            tail_lines: tail_lines.map(|n| n as u64),
            limit_bytes: limit_bytes.map(|n| n as u64),
            stream,
        })
    }
}

/// One line a simulated container "wrote" (without the newline).
#[derive(Clone, Debug)]
pub struct LogLine {
    pub at: Timestamp,
    pub text: String,
}

/// Whose log: the pod, the container, its image and node, and when it started.
#[derive(Clone, Debug)]
pub struct LogSource {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub image: String,
    pub node: String,
    pub started: Timestamp,
}

impl LogSource {
    /// Line `n` (1-based): deterministic text naming the pod, the container and its image.
    pub fn line(&self, n: usize) -> String {
        let who = format!("fake log line {n} of pod {}/{} container {}", self.namespace, self.pod, self.container);
        match n {
            1 => format!("{who}: started, image {}, node {}", self.image, self.node),
            2 => format!("{who}: the simulated member runs no containers, it writes these lines"),
            3 => format!("{who}: ready"),
            _ => format!("{who}: still running"),
        }
    }

    /// The lines written since the container started, a millisecond apart.
    fn static_lines(&self) -> Vec<LogLine> {
        (0..STATIC_LINES).map(|i| LogLine { at: self.started + jiff::SignedDuration::from_millis(i as i64), text: self.line(i + 1) }).collect()
    }

    /// The source of `container` in `pod`, when the pod names it.
    pub fn of(pod: &Pod, container: &str) -> Option<LogSource> {
        let spec = pod.spec.as_ref()?;
        let image = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .find(|c| c.name == container)
            .map(|c| c.image.clone())
            .or_else(|| spec.ephemeral_containers.iter().flatten().find(|c| c.name == container).map(|c| c.image.clone()))?;
        Some(LogSource {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            pod: pod.metadata.name.clone().unwrap_or_default(),
            container: container.to_string(),
            image: image.unwrap_or_default(),
            node: spec.node_name.clone().unwrap_or_default(),
            started: started(pod, container),
        })
    }
}

/// When the container "started": its running or terminated state's start, else the pod's
/// start or creation time.
fn started(pod: &Pod, container: &str) -> Timestamp {
    let status = pod.status.as_ref();
    let statuses = status.and_then(|s| s.container_statuses.as_ref()).into_iter().flatten();
    let init = status.and_then(|s| s.init_container_statuses.as_ref()).into_iter().flatten();
    let from_state = statuses.chain(init).filter(|s| s.name == container).find_map(|s| {
        let state = s.state.as_ref()?;
        state.running.as_ref().and_then(|r| r.started_at.clone()).or_else(|| state.terminated.as_ref().and_then(|t| t.started_at.clone()))
    });
    from_state
        .or_else(|| status.and_then(|s| s.start_time.clone()))
        .or_else(|| pod.metadata.creation_timestamp.clone())
        .map(|t| t.0)
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

/// `2006-01-02T15:04:05.000000000Z`: the kubelet's fixed-width RFC3339Nano, in UTC.
pub fn fixed_nanos(t: Timestamp) -> String {
    let dt = t.to_zoned(jiff::tz::TimeZone::UTC).datetime();
    format!("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z", dt.year(), dt.month(), dt.day(), dt.hour(), dt.minute(), dt.second(), dt.subsec_nanosecond())
}

/// Renders lines as the kubelet writes them: an optional timestamp prefix, lines before
/// `since` left out, the output cut (even mid-line) at `limitBytes`.
#[derive(Debug)]
pub struct LogWriter {
    opts: LogOptions,
    /// Bytes left when `limitBytes` is set.
    left: Option<u64>,
}

impl LogWriter {
    pub fn new(opts: LogOptions) -> LogWriter {
        LogWriter { left: opts.limit_bytes, opts }
    }

    /// Whether the limit has been reached: nothing more is written.
    pub fn done(&self) -> bool {
        self.left == Some(0)
    }

    /// The bytes of one line (empty when it is left out).
    pub fn render(&mut self, line: &LogLine) -> Vec<u8> {
        if self.done() || self.opts.since.is_some_and(|s| line.at < s) || self.opts.stream == LogStream::Stderr {
            // The simulated containers write to stdout only.
            return Vec::new();
        }
        let mut b = Vec::new();
        if self.opts.timestamps {
            b.extend_from_slice(fixed_nanos(line.at).as_bytes());
            b.push(b' ');
        }
        b.extend_from_slice(line.text.as_bytes());
        b.push(b'\n');
        if let Some(left) = self.left.as_mut() {
            b.truncate((*left).min(b.len() as u64) as usize);
            *left -= b.len() as u64;
        }
        b
    }

    /// The container's lines so far: the last `tailLines` of the static ones.
    pub fn backlog(&mut self, source: &LogSource) -> Vec<u8> {
        let mut lines = source.static_lines();
        if let Some(t) = self.opts.tail_lines {
            let keep = (t as usize).min(lines.len());
            lines.drain(..lines.len() - keep);
        }
        lines.iter().flat_map(|l| self.render(l)).collect()
    }
}

/// Whether the container still runs (its pod is there, the same one, not terminating nor
/// finished): asked before each followed line.
pub type Alive = Box<dyn Fn() -> BoxFuture<'static, bool> + Send + Sync>;

/// The body of a `pods/log` answer: the backlog, then with `follow` a line `every` (a second:
/// [`FOLLOW_EVERY`]) until the caller goes away (the body is dropped), the container stops or
/// `limitBytes` is reached.
pub fn body(source: LogSource, opts: LogOptions, every: Duration, alive: Alive) -> ConnectBody {
    let follow = opts.follow;
    let mut w = LogWriter::new(opts);
    let backlog = Bytes::from(w.backlog(&source));
    let first = futures::stream::once(async move { Ok(backlog) });
    if !follow {
        return first.boxed();
    }
    let ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    let rest = futures::stream::unfold((w, ticks, STATIC_LINES + 1, source, alive), |(mut w, mut ticks, n, source, alive)| async move {
        if w.done() {
            return None;
        }
        ticks.tick().await;
        if !alive().await {
            return None;
        }
        let line = LogLine { at: Timestamp::now(), text: source.line(n) };
        let bytes = Bytes::from(w.render(&line));
        Some((Ok(bytes), (w, ticks, n + 1, source, alive)))
    });
    first.chain(rest).boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2025-06-01T12:00:00Z".parse().unwrap()
    }

    fn parse(q: &str) -> Result<LogOptions, String> {
        LogOptions::parse(&Query::parse(Some(q)), now())
    }

    fn source() -> LogSource {
        LogSource {
            namespace: "default".into(),
            pod: "web".into(),
            container: "nginx".into(),
            image: "nginx:1.27".into(),
            node: "member1-node-1".into(),
            started: "2025-06-01T11:00:00.5Z".parse().unwrap(),
        }
    }

    fn text(opts: LogOptions) -> String {
        String::from_utf8(LogWriter::new(opts).backlog(&source())).unwrap()
    }

    #[test]
    fn options_are_read_as_the_kubelet_reads_them() {
        let o = parse("container=c&follow=true&timestamps=1&tailLines=2&limitBytes=10&sinceSeconds=60&stream=Stdout").unwrap();
        assert_eq!(o.container, "c");
        assert!(o.follow && o.timestamps && !o.previous);
        assert_eq!((o.tail_lines, o.limit_bytes), (Some(2), Some(10)));
        assert_eq!(o.since, Some("2025-06-01T11:59:00Z".parse().unwrap()));
        assert_eq!(o.stream, LogStream::Stdout);
        let d = parse("").unwrap();
        assert!(!d.follow && d.tail_lines.is_none() && d.since.is_none() && d.stream == LogStream::All);
        assert_eq!(parse("tail=1").unwrap().tail_lines, Some(1), "the legacy tail");
        assert_eq!(parse("tail=all").unwrap().tail_lines, None);
        assert_eq!(parse("tail=1&tailLines=2").unwrap().tail_lines, Some(2), "tailLines wins");
        assert_eq!(parse("tailLines=0").unwrap().tail_lines, Some(0));
        assert_eq!(parse("sinceTime=2025-06-01T10:00:00Z").unwrap().since, Some("2025-06-01T10:00:00Z".parse().unwrap()));
    }

    #[test]
    fn bad_option_values_are_refused() {
        assert_eq!(parse("follow=yes").unwrap_err(), "follow=\"yes\": not a boolean");
        assert_eq!(parse("tailLines=-1").unwrap_err(), "tailLines=\"-1\": want an integer >= 0");
        assert_eq!(parse("tail=x").unwrap_err(), "tailLines=\"x\": want an integer >= 0");
        assert_eq!(parse("limitBytes=0").unwrap_err(), "limitBytes=\"0\": want an integer >= 1");
        assert_eq!(parse("sinceSeconds=0").unwrap_err(), "sinceSeconds=\"0\": want an integer >= 1");
        assert_eq!(parse("sinceSeconds=5&sinceTime=2025-06-01T10:00:00Z").unwrap_err(), "at most one of sinceTime or sinceSeconds may be specified");
        assert_eq!(parse("sinceTime=yesterday").unwrap_err(), "sinceTime=\"yesterday\": not an RFC3339 time");
        assert_eq!(parse("stream=Both").unwrap_err(), "invalid stream type \"Both\"");
    }

    #[test]
    fn the_lines_name_the_pod_container_image_and_node() {
        let o = parse("").unwrap();
        assert_eq!(
            text(o),
            "fake log line 1 of pod default/web container nginx: started, image nginx:1.27, node member1-node-1\n\
             fake log line 2 of pod default/web container nginx: the simulated member runs no containers, it writes these lines\n\
             fake log line 3 of pod default/web container nginx: ready\n"
        );
        assert_eq!(source().line(4), "fake log line 4 of pod default/web container nginx: still running");
    }

    #[test]
    fn tail_timestamps_since_stream_and_limit_shape_the_output() {
        assert_eq!(text(parse("tailLines=1").unwrap()), "fake log line 3 of pod default/web container nginx: ready\n");
        assert_eq!(text(parse("tailLines=0").unwrap()), "");
        assert_eq!(text(parse("tailLines=9").unwrap()).lines().count(), 3);
        assert_eq!(
            text(parse("tailLines=1&timestamps=true").unwrap()),
            "2025-06-01T11:00:00.502000000Z fake log line 3 of pod default/web container nginx: ready\n"
        );
        // The second line was written at .501: since .5015 leaves the third only.
        assert_eq!(text(parse("sinceTime=2025-06-01T11:00:00.5015Z").unwrap()).lines().count(), 1);
        assert_eq!(text(parse("stream=Stderr").unwrap()), "", "the containers write to stdout only");
        assert_eq!(text(parse("limitBytes=20").unwrap()), "fake log line 1 of p", "cut mid-line");
        let mut w = LogWriter::new(parse("limitBytes=20").unwrap());
        w.backlog(&source());
        assert!(w.done());
        assert!(w.render(&LogLine { at: now(), text: "more".into() }).is_empty());
        assert_eq!(fixed_nanos("2025-01-02T03:04:05Z".parse().unwrap()), "2025-01-02T03:04:05.000000000Z");
    }

    #[tokio::test]
    async fn follow_adds_a_line_a_second_until_the_container_stops() {
        let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(2));
        let r = runs.clone();
        let alive: Alive = Box::new(move || {
            let left = r.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            Box::pin(async move { left > 0 })
        });
        let opts = parse("follow=true&tailLines=1").unwrap();
        let chunks: Vec<Bytes> = body(source(), opts, Duration::from_millis(5), alive).map(Result::unwrap).collect().await;
        let all = String::from_utf8(chunks.concat()).unwrap();
        let lines: Vec<&str> = all.lines().collect();
        assert_eq!(lines.len(), 3, "{all}");
        assert!(lines[1].starts_with("fake log line 4 ") && lines[2].starts_with("fake log line 5 "), "{all}");
    }
}
