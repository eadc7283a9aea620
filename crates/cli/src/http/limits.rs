//! The limits of every HTTP listener (SPEC §9): the header timeout, the idle timeout of a
//! kept-alive connection and the cap of open connections, their defaults and their flags'
//! checks, and the process's soft limit of open files raised, once, so that the caps fit.
//!
//! Plain values and one system call; the accept loop that applies them is [`super::listener`].

use std::time::Duration;

/// The default header timeout (`--http-header-timeout-ms`): SPEC §9's 10 s. A real client sends
/// its headers in one write, within a round trip; ten seconds is generous even on a bad link.
pub const DEFAULT_HEADER_TIMEOUT_MS: u64 = 10_000;
/// The default idle timeout of a kept-alive connection (`--http-idle-timeout-ms`): 75 s, longer
/// than the 60 s for which load balancers (AWS ALB's default, nginx's upstream keepalive) keep an
/// idle connection to a backend, so that they let go of it first and never send a request on a
/// connection this side is closing (nginx's own default is 75 s for the same reason).
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 75_000;
/// The default cap of open connections per listener (`--http-max-connections`): 1,024. A client
/// holds one or two (its POSTs, and a `GET /mcp` stream while it listens), a load balancer pools a
/// few dozen per replica, so this is far above what a proxy serves; at about 15 KiB each
/// (measured) it is some 15 MiB at most, and two listeners' worth stays well under the open-file
/// limit this process raises itself to ([`fit_open_files`]).
pub const DEFAULT_MAX_CONNECTIONS: u32 = 1_024;
/// The longest timeout the flags accept: a day (longer is no timeout in practice).
const MAX_TIMEOUT_MS: u64 = 86_400_000;
/// The largest cap the flags accept.
const MAX_CONNECTIONS: u32 = 1_000_000;
/// The soft limit of open files this process raises itself to (never above the hard limit).
/// Not the hard limit itself (often 524,288 or more): the servers it starts inherit the limit,
/// and some programs walk every possible descriptor up to it.
const OPEN_FILES_TARGET: u64 = 65_536;
/// Open files kept for everything but HTTP connections (the servers' pipes, sockets to `url`
/// servers, catalogs, the runtime's own), when the caps are fitted under the limit.
const RESERVED_FILES: u64 = 1_024;
/// How every HTTP listener of the process treats slow and idle connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Request headers must be complete within this long, from accept or from a later request's
    /// first byte.
    pub header_timeout: Duration,
    /// A kept-alive connection with no request in flight is closed after this long.
    pub idle_timeout: Duration,
    /// Open connections per listener; past them a new one is closed at once.
    pub max_connections: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_millis(DEFAULT_HEADER_TIMEOUT_MS),
            idle_timeout: Duration::from_millis(DEFAULT_IDLE_TIMEOUT_MS),
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// The value of `--http-header-timeout-ms` and `--http-idle-timeout-ms`: 1 ms to a day.
pub fn timeout_ms(text: &str) -> Result<u64, String> {
    let ms: u64 = text
        .trim()
        .parse()
        .map_err(|_| format!("\"{text}\" is not a whole number of milliseconds"))?;
    match ms {
        0 => Err("must be at least 1 ms: 0 would close every connection at once".into()),
        ms if ms > MAX_TIMEOUT_MS => Err(format!(
            "must be at most {MAX_TIMEOUT_MS} ms (a day); a longer timeout is none at all"
        )),
        ms => Ok(ms),
    }
}

/// The value of `--http-max-connections`: 1 to a million.
pub fn max_connections(text: &str) -> Result<u32, String> {
    let cap: u32 = text
        .trim()
        .parse()
        .map_err(|_| format!("\"{text}\" is not a whole number of connections"))?;
    match cap {
        0 => Err("must be at least 1: 0 would refuse every connection".into()),
        cap if cap > MAX_CONNECTIONS => Err(format!("must be at most {MAX_CONNECTIONS}")),
        cap => Ok(cap),
    }
}

/// Raise the soft limit of open files toward [`OPEN_FILES_TARGET`] (never above the hard limit,
/// never lowering it; nix's `setrlimit`), once, and return `limits` with the cap lowered, with a
/// warning, if `listeners` listeners at that cap would not fit under the limit in effect beside
/// [`RESERVED_FILES`]: past the limit, accept fails and even a connection over the cap cannot be
/// accepted to be closed, nor can a server be started.
pub fn fit_open_files(limits: Limits, listeners: usize) -> Limits {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if listeners == 0 {
        return limits;
    }
    let soft = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) => {
            let target = OPEN_FILES_TARGET.min(hard);
            if soft < target {
                match setrlimit(Resource::RLIMIT_NOFILE, target, hard) {
                    Ok(()) => {
                        tracing::debug!(
                            "raised the soft limit of open files from {soft} to {target}"
                        );
                        target
                    }
                    Err(error) => {
                        tracing::debug!(
                            "cannot raise the soft limit of open files from {soft} to {target}: {error}"
                        );
                        soft
                    }
                }
            } else {
                soft
            }
        }
        Err(error) => {
            tracing::debug!("cannot read the limit of open files: {error}");
            return limits;
        }
    };
    let fitted = cap_under(soft, listeners, limits.max_connections);
    if fitted < limits.max_connections {
        tracing::warn!(
            "the limit of open files is {soft}: each of the {listeners} HTTP listener(s) keeps at most {fitted} connections open, not {} (--http-max-connections); raise the limit (ulimit -n, LimitNOFILE=) to allow more",
            limits.max_connections
        );
    }
    Limits {
        max_connections: fitted,
        ..limits
    }
}

/// The cap per listener that fits `listeners` listeners under `soft` open files, leaving
/// [`RESERVED_FILES`] (or half the limit, when it is small) for the rest; at least 1.
fn cap_under(soft: u64, listeners: usize, cap: u32) -> u32 {
    let room = soft.saturating_sub(RESERVED_FILES).max(soft / 2);
    let per = room / u64::try_from(listeners.max(1)).unwrap_or(u64::MAX);
    u32::try_from(per).unwrap_or(u32::MAX).clamp(1, cap.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_the_documented_ones() {
        let limits = Limits::default();
        assert_eq!(limits.header_timeout, Duration::from_secs(10), "SPEC §9");
        assert_eq!(limits.idle_timeout, Duration::from_secs(75));
        assert_eq!(limits.max_connections, 1_024);
    }

    #[test]
    fn flag_values_are_checked() {
        assert_eq!(timeout_ms("300"), Ok(300));
        assert!(timeout_ms("0").unwrap_err().contains("at least 1 ms"));
        assert!(timeout_ms("-5").unwrap_err().contains("not a whole number"));
        assert!(timeout_ms("86400001").unwrap_err().contains("at most"));
        assert_eq!(max_connections("8"), Ok(8));
        assert!(max_connections("0").unwrap_err().contains("at least 1"));
        assert!(max_connections("1000001").is_err());
    }

    #[test]
    fn the_cap_fits_under_the_open_files_limit() {
        assert_eq!(cap_under(65_536, 2, 1_024), 1_024);
        assert_eq!(
            cap_under(1_024, 2, 1_024),
            256,
            "half of a small limit, shared"
        );
        assert_eq!(cap_under(4_096, 1, 4_000), 3_072);
        assert_eq!(cap_under(0, 2, 1_024), 1, "never 0");
    }
}
