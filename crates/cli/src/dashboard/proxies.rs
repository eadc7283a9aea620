//! The dashboard's side of a proxy's Unix socket: one `GET /dashboard/state` within a deadline
//! ([`fetch`]), the `GET /dashboard/events` stream read as states ([`follow`]), and the merge of
//! several proxies' states into one ([`merged`]). A proxy that does not answer is shown as
//! unreachable ([`unreachable()`]); one whose socket refuses is stale, and its files are removed.
//!
//! It only reads from proxies (never a POST), and holds no more of a stream than one event
//! ([`MAX_EVENT`]).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use futures::StreamExt;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use crate::http::page;
use crate::registry::{self, Entry, Reach, Verdict};

/// How long one proxy may take to answer `GET /dashboard/state` (connection included): a frozen
/// proxy cannot stall the page longer.
pub const ANSWER_LIMIT: Duration = Duration::from_secs(1);
/// How long a proxy's event stream may stay silent (it sends a keep-alive comment every
/// [`page::KEEP_ALIVE`]) before it is taken for frozen.
pub const SILENCE_LIMIT: Duration = Duration::from_secs(40);
/// The largest state (one answer, or one event) read from a proxy.
pub const MAX_EVENT: usize = 8 << 20;

/// What asking a proxy came to.
#[derive(Debug)]
pub enum Answer {
    /// Its `proxies`.
    Live(Vec<Value>),
    /// It is gone: its files are to be removed.
    Stale,
    /// It is there and does not answer.
    Unreachable,
}

/// An entry's `proxies` from its socket's `GET /dashboard/state`, within [`ANSWER_LIMIT`].
pub async fn fetch(entry: &Entry) -> Answer {
    let asked = tokio::time::timeout(ANSWER_LIMIT, async {
        let stream = registry::connect(&entry.socket).await?;
        get(stream, page::STATE, |body| async move {
            let bytes = axum::body::to_bytes(body, MAX_EVENT)
                .await
                .map_err(|_| Reach::Failed)?;
            proxies_of(&bytes).ok_or(Reach::Failed)
        })
        .await
    })
    .await;
    answer_of(entry.pid, asked.unwrap_or(Err(Reach::Failed)))
}

/// What a result of asking means, given whether the pid lives.
fn answer_of(pid: u32, asked: Result<Vec<Value>, Reach>) -> Answer {
    let reach = match &asked {
        Ok(_) => Reach::Answered,
        Err(reach) => *reach,
    };
    match (registry::verdict(registry::pid_alive(pid), reach), asked) {
        (Verdict::Live, Ok(proxies)) => Answer::Live(proxies),
        (Verdict::Stale, _) => Answer::Stale,
        (Verdict::Live | Verdict::Unreachable, _) => Answer::Unreachable,
    }
}

/// Send `GET path` on `stream` and hand a 200's body to `read`, driving the connection
/// meanwhile (all in this future: dropping it drops the connection).
async fn get<T, F, Fut>(stream: tokio::net::UnixStream, path: &str, read: F) -> Result<T, Reach>
where
    F: FnOnce(Body) -> Fut,
    Fut: Future<Output = Result<T, Reach>>,
{
    let (mut send, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|_| Reach::Failed)?;
    let request = Request::get(path)
        .header(header::HOST, "localhost")
        .body(Body::empty())
        .map_err(|_| Reach::Failed)?;
    let work = async move {
        let response = send
            .send_request(request)
            .await
            .map_err(|_| Reach::Failed)?;
        if response.status() != StatusCode::OK {
            return Err(Reach::Failed);
        }
        read(Body::new(response.into_body())).await
    };
    tokio::pin!(connection);
    tokio::pin!(work);
    tokio::select! {
        done = &mut work => done,
        // The connection ended before the work did: it broke.
        _ = &mut connection => Err(Reach::Failed),
    }
}

/// Follow an entry's `GET /dashboard/events`: `on_state` gets each state's `proxies` (the first
/// within [`ANSWER_LIMIT`], and no silence past [`SILENCE_LIMIT`], or it ends as failed);
/// returns how it ended (a stream that ended is [`Reach::Answered`]: the proxy closed it,
/// probably stopping).
pub async fn follow<F, Fut>(entry: &Entry, mut on_state: F) -> Reach
where
    F: FnMut(Vec<Value>) -> Fut,
    Fut: Future<Output = ()>,
{
    let stream = match registry::connect(&entry.socket).await {
        Ok(stream) => stream,
        Err(reach) => return reach,
    };
    // Cleared once the first state came: until then the whole exchange, the answer's head
    // included, must fit in ANSWER_LIMIT (a frozen proxy accepts and never answers).
    let waiting = AtomicBool::new(true);
    let ended = get(stream, page::EVENTS, |body| async {
        let mut chunks = body.into_data_stream();
        let mut events = Events::default();
        loop {
            // A live stream sends at least its keep-alive comment every 15 s.
            let next = tokio::time::timeout(SILENCE_LIMIT, chunks.next()).await;
            let chunk = match next {
                Ok(Some(Ok(chunk))) => chunk,
                Ok(None | Some(Err(_))) => return Ok(()),
                Err(_) => return Err(Reach::Failed),
            };
            for data in events.push(&chunk).map_err(|()| Reach::Failed)? {
                if let Some(proxies) = proxies_of(data.as_bytes()) {
                    waiting.store(false, Ordering::Relaxed);
                    on_state(proxies).await;
                }
            }
        }
    });
    tokio::pin!(ended);
    let first = tokio::time::sleep(ANSWER_LIMIT);
    tokio::pin!(first);
    let mut armed = true;
    loop {
        tokio::select! {
            ended = &mut ended => return ended.map_or_else(|reach| reach, |()| Reach::Answered),
            () = &mut first, if armed => {
                if waiting.load(Ordering::Relaxed) {
                    return Reach::Failed;
                }
                armed = false;
            }
        }
    }
}

/// A state's `proxies`, each tagged with nothing more; `None` when it is not a state.
fn proxies_of(bytes: &[u8]) -> Option<Vec<Value>> {
    let mut state: Value = serde_json::from_slice(bytes).ok()?;
    match state.get_mut("proxies")?.take() {
        Value::Array(proxies) => Some(proxies),
        _ => None,
    }
}

/// How an unreachable proxy shows: its entry's name, kind and pid, no servers.
pub fn unreachable(entry: &Entry) -> Value {
    json!({
        "id": entry.pid.to_string(),
        "name": entry.name,
        "kind": entry.kind,
        "pid": entry.pid,
        "startedAt": entry.started_at,
        "servers": [],
        "unreachable": true,
    })
}

/// One State of many proxies: sorted by name, then pid.
pub fn merged(proxies: impl IntoIterator<Item = Value>) -> Value {
    let mut proxies: Vec<Value> = proxies.into_iter().collect();
    proxies.sort_by(|a, b| {
        let key = |p: &Value| {
            (
                p.get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                p.get("pid").and_then(Value::as_u64).unwrap_or(0),
            )
        };
        key(a).cmp(&key(b))
    });
    json!({ "now": mcp_supervisor::history::unix_ms(SystemTime::now()), "proxies": proxies })
}

/// The merged state of every live proxy in `folder` now, each asked at once; stale entries are
/// removed on the way.
pub async fn state_now(folder: &Path) -> Result<Value, String> {
    let entries = registry::scan(folder)?;
    let answers = futures::future::join_all(entries.iter().map(fetch)).await;
    let mut proxies = Vec::new();
    for (entry, answer) in entries.iter().zip(answers) {
        match answer {
            Answer::Live(list) => proxies.extend(list),
            Answer::Unreachable => proxies.push(unreachable(entry)),
            Answer::Stale => registry::remove_stale(folder, entry.pid),
        }
    }
    Ok(merged(proxies))
}

/// Server-sent events read from a byte stream: each complete event's `data` (its `data:` lines
/// joined by newlines), at most [`MAX_EVENT`] bytes of one held.
#[derive(Default)]
pub struct Events {
    /// The bytes of the line not yet ended.
    line: Vec<u8>,
    /// The data of the event not yet ended.
    data: Option<String>,
}

impl Events {
    /// Take `bytes`; the data of each event they end. `Err` when an event is over the limit.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<String>, ()> {
        let mut done = Vec::new();
        for &byte in bytes {
            if byte != b'\n' {
                self.line.push(byte);
                let held = self.line.len() + self.data.as_ref().map_or(0, String::len);
                if held > MAX_EVENT {
                    return Err(());
                }
                continue;
            }
            let line = std::mem::take(&mut self.line);
            let line = line.strip_suffix(b"\r").unwrap_or(&line);
            if line.is_empty() {
                done.extend(self.data.take());
                continue;
            }
            let text = String::from_utf8_lossy(line);
            if let Some(value) = text.strip_prefix("data:") {
                let value = value.strip_prefix(' ').unwrap_or(value);
                match &mut self.data {
                    Some(data) => {
                        data.push('\n');
                        data.push_str(value);
                    }
                    None => self.data = Some(value.to_owned()),
                }
            }
            // `event:`, `id:`, `retry:` and comments (`: keep-alive`) say nothing more here.
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_their_data_lines_however_the_bytes_are_cut() {
        let text = b": keep-alive\n\nevent: state\ndata: {\"a\":1}\n\nevent: state\r\ndata: x\r\ndata:y\r\n\r\n";
        for cut in 0..text.len() {
            let mut events = Events::default();
            let mut got = events.push(&text[..cut]).expect("small");
            got.extend(events.push(&text[cut..]).expect("small"));
            assert_eq!(
                got,
                vec!["{\"a\":1}".to_owned(), "x\ny".to_owned()],
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn an_event_over_the_limit_ends_the_stream() {
        let mut events = Events::default();
        let big = vec![b'x'; MAX_EVENT + 1];
        assert!(events.push(b"data: ").is_ok());
        assert!(events.push(&big).is_err());
    }

    #[test]
    fn a_state_gives_its_proxies_and_anything_else_none() {
        assert_eq!(
            proxies_of(br#"{"now":1,"proxies":[{"id":"1"}]}"#),
            Some(vec![json!({"id": "1"})])
        );
        assert_eq!(proxies_of(br#"{"now":1}"#), None);
        assert_eq!(proxies_of(b"not json"), None);
    }

    #[test]
    fn merged_proxies_are_sorted_by_name_then_pid() {
        let state = merged([
            json!({"name": "b", "pid": 1}),
            json!({"name": "a", "pid": 9}),
            json!({"name": "a", "pid": 3}),
        ]);
        let order: Vec<(String, u64)> = state["proxies"]
            .as_array()
            .expect("array")
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().unwrap_or("").to_owned(),
                    p["pid"].as_u64().unwrap_or(0),
                )
            })
            .collect();
        assert_eq!(order, [("a".into(), 3), ("a".into(), 9), ("b".into(), 1)]);
        assert!(state["now"].as_u64().is_some_and(|now| now > 0));
    }

    #[test]
    fn an_unreachable_proxy_shows_its_entry_and_no_servers() {
        let entry = Entry {
            pid: 7,
            kind: registry::Kind::Wrap,
            name: "a".into(),
            command: None,
            config: None,
            started_at: 5,
            socket: "/x/7.sock".into(),
            version: "0".into(),
        };
        assert_eq!(
            unreachable(&entry),
            json!({"id": "7", "name": "a", "kind": "wrap", "pid": 7, "startedAt": 5, "servers": [], "unreachable": true})
        );
    }
}
