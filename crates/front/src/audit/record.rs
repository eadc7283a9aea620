//! One line of the audit trail (SPEC §14), as values: who sent a request ([`Who`]), what it
//! named ([`Target`]), what became of it ([`Outcome`], [`Recovery`]), and the line itself
//! ([`Record`], built through [`Pending`]), with its time written as RFC 3339.
//!
//! A record holds names, numbers and times only: it has no place for a token, an argument
//! value or a result, and a session is kept as a digest of its id. It never writes anything:
//! [`super::Audit`] does.

use std::time::{SystemTime, UNIX_EPOCH};

use mcp_supervisor::CallError;
use serde::Serialize;
use serde_json::value::RawValue;
use tokio::time::Instant;

use crate::message::Head;

/// A name (method, server, tool, prompt, URI) longer than this is cut: the client chooses some
/// of them, and a line stays a line.
pub(super) const MAX_NAME: usize = 1024;

// === Record ===

/// Who sent a request, as the audit names them. Build it with [`Who::new`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Who {
    sub: Option<String>,
    client_id: Option<String>,
    session: Option<String>,
}

impl Who {
    /// The token's `sub` and `client_id` claims (RFC 9068), and the id of the session the
    /// request came on. The session id is kept only as [`session_tag`] of it: a session id lets
    /// a client resume its session, so it is not written down. It costs a SHA-256: make one
    /// per session (or caller) and clone it for each request.
    pub fn new(sub: Option<&str>, client_id: Option<&str>, session_id: Option<&str>) -> Self {
        Self {
            sub: sub.map(name),
            client_id: client_id.map(name),
            session: session_id.map(session_tag),
        }
    }
}

/// What a session is called in the audit: the first 24 hex digits of the SHA-256 of its id.
/// It joins the records of one session without holding the id itself; an operator who has an
/// id finds its records with `printf %s ID | sha256sum | cut -c1-24`.
pub fn session_tag(session_id: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, session_id.as_bytes());
    let mut tag = String::with_capacity(24);
    for byte in &digest.as_ref()[..12] {
        tag.push(char::from(HEX[usize::from(byte >> 4)]));
        tag.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    tag
}

/// The upstream name a request is about: written as `tool`, `prompt` or `uri`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    Tool(String),
    Prompt(String),
    Uri(String),
}

impl Target {
    /// What a request names, as the client wrote it: `tools/call` a tool, `prompts/get` a
    /// prompt, `resources/read`, `resources/subscribe` and `resources/unsubscribe` a URI;
    /// nothing for other methods. In `serve`, replace a prefixed tool or prompt name with the
    /// upstream name from its route before the record is finished.
    pub fn requested(method: &str, head: &Head) -> Option<Self> {
        match method {
            "tools/call" => head.name.as_deref().map(|n| Target::Tool(name(n))),
            "prompts/get" => head.name.as_deref().map(|n| Target::Prompt(name(n))),
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                head.uri.as_deref().map(|u| Target::Uri(name(u)))
            }
            _ => None,
        }
    }
}

/// What became of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The server answered with a result.
    Ok,
    /// It reached the server, which answered with an error (a JSON-RPC error, a reply that is
    /// not a result, or a tool result with `isError: true`).
    Error,
    /// Refused by an `authorize` rule; nothing went upstream.
    Denied,
    /// Refused by a `rateLimit`; nothing went upstream.
    RateLimited,
    /// Refused at the HTTP face for want of a valid token (`401`); nothing ran.
    Unauthenticated,
    /// Refused at the HTTP face with a valid token (`403`): a scope it lacks, or a session
    /// another identity opened; nothing ran.
    Forbidden,
    /// It did not run: never sent, not delivered, or refused by the server unrun.
    DidNotRun,
    /// It may have run: sent, and its answer lost (a timeout, a broken connection, a cancel).
    MayHaveRun,
}

impl Outcome {
    /// What became of a request the hub ran ([`mcp_supervisor::Hub::call_json`],
    /// [`mcp_supervisor::Hub::send`]), as the library's error says whether it ran.
    pub fn of_call(result: Result<&RawValue, &CallError>) -> Self {
        let error = match result {
            Ok(result) if crate::json::is_error(result) => return Outcome::Error,
            Ok(_) => return Outcome::Ok,
            Err(error) => error,
        };
        match error {
            CallError::ServerError { .. } | CallError::Malformed { .. } => Outcome::Error,
            CallError::UnknownTool { .. }
            | CallError::NotReady { .. }
            | CallError::NotDelivered { .. }
            | CallError::NotAuthorized { .. }
            | CallError::TooManyInstances { .. }
            | CallError::Withheld { .. } => Outcome::DidNotRun,
            // ReconnectFailed: the first send may have been delivered (the error does not say).
            CallError::TimedOut { .. }
            | CallError::OutcomeUnknown { .. }
            | CallError::ReconnectFailed { .. }
            | CallError::Cancelled { .. } => Outcome::MayHaveRun,
        }
    }
}

/// What recovery did for a request: how many times it was sent, whether it was sent again,
/// and the generations it went to. A member is `None` (written `null`) where the library does
/// not say: it is never guessed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Recovery {
    pub attempts: Option<u32>,
    pub replayed: Option<bool>,
    pub generations: Option<Vec<u64>>,
}

impl Recovery {
    /// Nothing was sent: refused here, or by the hub before it went out.
    pub fn not_sent() -> Self {
        Self {
            attempts: Some(0),
            replayed: Some(false),
            generations: Some(Vec::new()),
        }
    }

    /// What the library's answer alone says of a request it ran (where no
    /// [`mcp_supervisor::CallReport`] came, see [`Recovery::of_report`]): only the errors that
    /// imply attempts fill them in: those sent nothing, `NotDelivered` (it fails only after
    /// the one resend), `ReconnectFailed` (the first send failed and no fresh connection came
    /// for the second). A result or any other error leaves them unknown.
    pub fn of_call(result: Result<&RawValue, &CallError>) -> Self {
        let Err(error) = result else {
            return Self::default();
        };
        match error {
            // Refused before anything went out (NotReady: as the library documents it).
            CallError::UnknownTool { .. }
            | CallError::NotReady { .. }
            | CallError::TooManyInstances { .. }
            | CallError::Withheld { .. } => Self::not_sent(),
            CallError::NotDelivered { .. } => Self {
                attempts: Some(2),
                replayed: Some(true),
                generations: None,
            },
            CallError::ReconnectFailed { .. } => Self {
                attempts: Some(1),
                replayed: Some(false),
                generations: None,
            },
            // Answered (or lost) on the first send or on the resend: the error does not say.
            CallError::ServerError { .. }
            | CallError::Malformed { .. }
            | CallError::NotAuthorized { .. }
            | CallError::TimedOut { .. }
            | CallError::OutcomeUnknown { .. }
            | CallError::Cancelled { .. } => Self::default(),
        }
    }
}

impl Recovery {
    /// What the library reported of a call it sent: every member known.
    pub fn of_report(report: &mcp_supervisor::CallReport) -> Self {
        Self {
            attempts: Some(report.attempts),
            replayed: Some(report.replayed),
            generations: Some(report.generations.clone()),
        }
    }
}

/// One line of the audit. Every member is a name, a number or a time; only a [`Pending`]
/// request makes one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Record {
    /// When the request arrived (RFC 3339, UTC, milliseconds).
    #[serde(serialize_with = "write_time")]
    pub(super) time: SystemTime,
    sub: Option<String>,
    client_id: Option<String>,
    /// [`session_tag`] of the session's id.
    session: Option<String>,
    server: Option<String>,
    /// `None` for a request refused before its body was read.
    method: Option<String>,
    #[serde(flatten)]
    target: Option<Target>,
    outcome: Outcome,
    recovery: Recovery,
    duration_ms: u64,
}

impl Record {
    pub fn outcome(&self) -> Outcome {
        self.outcome
    }

    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    pub fn server(&self) -> Option<&str> {
        self.server.as_deref()
    }

    pub fn target(&self) -> Option<&Target> {
        self.target.as_ref()
    }
}

/// A request on its way: made when it arrives, finished into a [`Record`] when it ends.
#[derive(Debug)]
pub struct Pending {
    time: SystemTime,
    started: Instant,
    who: Who,
    method: Option<String>,
    server: Option<String>,
    target: Option<Target>,
}

impl Pending {
    /// A request of `who` with `method` arrives now.
    pub fn new(who: Who, method: &str) -> Self {
        Self {
            method: Some(name(method)),
            ..Self::unread(who)
        }
    }

    /// A request of `who` arrives now, refused before its body is read (so its method is not
    /// known): the HTTP face's `401` and `403`.
    pub fn unread(who: Who) -> Self {
        Self {
            time: SystemTime::now(),
            started: Instant::now(),
            who,
            method: None,
            server: None,
            target: None,
        }
    }

    /// The server it goes to, and the upstream name it is about, once routed.
    pub fn routed(&mut self, server: &str, target: Option<Target>) {
        self.server = Some(name(server));
        self.named(target);
    }

    /// The name it is about, with no one server to name (refused before it was routed: the
    /// name as the client wrote it).
    pub fn named(&mut self, target: Option<Target>) {
        self.target = target.map(|target| match target {
            Target::Tool(n) => Target::Tool(cut(n)),
            Target::Prompt(n) => Target::Prompt(cut(n)),
            Target::Uri(u) => Target::Uri(cut(u)),
        });
    }

    /// It ended now with `outcome` after what `recovery` says.
    pub fn finish(self, outcome: Outcome, recovery: Recovery) -> Record {
        let elapsed = self.started.elapsed();
        Record {
            time: self.time,
            sub: self.who.sub,
            client_id: self.who.client_id,
            session: self.who.session,
            server: self.server,
            method: self.method,
            target: self.target,
            outcome,
            recovery,
            duration_ms: u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// It ended now as the hub's call did: the result or error is read for what became of it,
    /// never written.
    pub fn finish_call(self, result: Result<&RawValue, &CallError>) -> Record {
        self.finish(Outcome::of_call(result), Recovery::of_call(result))
    }
}

/// `text`, cut at a character boundary to at most [`MAX_NAME`] bytes.
pub(super) fn name(text: &str) -> String {
    text[..name_end(text)].to_string()
}

/// [`name`] of a string already owned.
fn cut(mut text: String) -> String {
    text.truncate(name_end(&text));
    text
}

/// Where [`name`] cuts `text`.
fn name_end(text: &str) -> usize {
    if text.len() <= MAX_NAME {
        return text.len();
    }
    let mut end = MAX_NAME;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    end
}

// === Time ===

fn write_time<S: serde::Serializer>(time: &SystemTime, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&rfc3339(*time))
}

/// `time` as RFC 3339 in UTC with milliseconds: `2024-02-29T12:34:56.789Z`.
pub fn rfc3339(time: SystemTime) -> String {
    // Milliseconds since 1970; before it, a part of a millisecond counts as the whole one.
    let millis: i64 = match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
        Err(before) => {
            let before = before.duration();
            let whole = i64::try_from(before.as_millis()).unwrap_or(i64::MAX - 1);
            -whole - i64::from(before.subsec_nanos() % 1_000_000 != 0)
        }
    };
    let seconds = millis.div_euclid(1000);
    let of_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
    let parts = [
        (0..4, year),
        (5..7, i64::from(month)),
        (8..10, i64::from(day)),
        (11..13, of_day / 3600),
        (14..16, of_day / 60 % 60),
        (17..19, of_day % 60),
        (20..23, millis.rem_euclid(1000)),
    ];
    if !(0..=9999).contains(&year) {
        // Not RFC 3339 (a year before 0 or past 9999), but still written.
        let [_, (_, m), (_, d), (_, h), (_, min), (_, s), (_, ms)] = parts;
        return format!("{year:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}.{ms:03}Z");
    }
    // Digit by digit: `format!` would cost more than the rest of the line (one per request).
    let mut text = *b"0000-00-00T00:00:00.000Z";
    for (at, value) in parts {
        let mut value = value.unsigned_abs();
        for digit in text[at].iter_mut().rev() {
            *digit = b'0' + (value % 10) as u8;
            value /= 10;
        }
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// The proleptic Gregorian date `days` after 1970-01-01: counted in 400-year eras of 146,097
/// days, each from March 1st, so that the leap day falls at the end of a year.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let from_march_0000 = days + 719_468;
    let era = from_march_0000.div_euclid(146_097);
    let day_of_era = from_march_0000.rem_euclid(146_097); // 0..=146_096
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153; // 0 = March, 11 = February
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = era * 400 + year_of_era + i64::from(month <= 2);
    // Both are in range by construction (1..=31, 1..=12).
    (year, in_range(month), in_range(day))
}

fn in_range(value: i64) -> u32 {
    u32::try_from(value).unwrap_or(0)
}
