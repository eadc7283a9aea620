//! The outcomes of the proxy's connection attempts, read from its log: when each attempt of a
//! server ended, and whether it connected. Verdict (d2) uses them to tell a call that failed
//! although the attempt it had to wait for succeeded (SPEC §5) from one that failed with it.

use std::path::Path;

use serde::Serialize;

/// One attempt's end as the proxy logged it.
#[derive(Clone, Debug, Serialize)]
pub struct AttemptEnd {
    /// ms since the load started (may be negative: before it).
    pub t_ms: f64,
    pub server: String,
    /// Whether the attempt connected (`connected` / `recovered`), or failed.
    pub connected: bool,
}

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Unix seconds of an RFC 3339 UTC timestamp like `2026-12-02T16:47:37.559324Z`.
pub fn parse_utc(stamp: &str) -> Option<f64> {
    let stamp = stamp.strip_suffix('Z')?;
    let (date, time) = stamp.split_once('T')?;
    let mut date = date.split('-').map(|p| p.parse::<i64>());
    let (y, mo, d) = (date.next()?.ok()?, date.next()?.ok()?, date.next()?.ok()?);
    let mut time = time.split(':');
    let h: i64 = time.next()?.parse().ok()?;
    let mi: i64 = time.next()?.parse().ok()?;
    let s: f64 = time.next()?.parse().ok()?;
    let days = days_from_civil(y, mo, d);
    Some((days * 86_400 + h * 3_600 + mi * 60) as f64 + s)
}

/// The attempt ends in the proxy's text log, placed on the run's clock (`t0_unix`).
pub fn read(log: &Path, t0_unix: f64) -> Vec<AttemptEnd> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut ends = Vec::new();
    for line in text.lines() {
        if !line.contains("mcp_supervisor::supervisor:") {
            continue;
        }
        let connected = if line.contains("supervisor: connection failed: ") {
            false
        } else if line.contains("supervisor: recovered: ")
            || line.contains("supervisor: connected ")
        {
            true
        } else {
            continue;
        };
        let Some(stamp) = line.split_whitespace().next().and_then(parse_utc) else {
            continue;
        };
        let Some(server) = line
            .rfind(" server=")
            .map(|i| &line[i + " server=".len()..])
            .and_then(|rest| rest.split_whitespace().next())
        else {
            continue;
        };
        ends.push(AttemptEnd {
            t_ms: (stamp - t0_unix) * 1000.0,
            server: server.to_owned(),
            connected,
        });
    }
    ends
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_utc_stamps() {
        assert_eq!(parse_utc("1970-01-01T00:00:00Z"), Some(0.0));
        let t = parse_utc("2026-12-02T16:47:37.559324Z").unwrap();
        assert!((t - 1_796_230_057.559_324).abs() < 1e-6, "{t}");
        assert_eq!(parse_utc("2026-12-02 16:47:37"), None);
    }

    #[test]
    fn reads_attempt_ends() {
        let dir = std::env::temp_dir().join(format!("soak-attempts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("proxy.log");
        std::fs::write(
            &log,
            "1970-01-01T00:00:10.000000Z  INFO mcp_supervisor::supervisor: recovered: the connection is ready again server=s1 generation=3\n\
             1970-01-01T00:00:10.500000Z  WARN mcp_supervisor::supervisor: connection failed: refused; reconnecting in 100 ms (attempt 2/9) server=h0 attempt=2\n\
             1970-01-01T00:00:11.000000Z  WARN mcp_supervisor::supervisor: connection lost: gone server=s1 attempt=1\n",
        )
        .unwrap();
        let ends = read(&log, 9.0);
        assert_eq!(ends.len(), 2);
        assert_eq!((ends[0].server.as_str(), ends[0].connected), ("s1", true));
        assert!((ends[0].t_ms - 1000.0).abs() < 1e-6);
        assert_eq!((ends[1].server.as_str(), ends[1].connected), ("h0", false));
        let _ = std::fs::remove_dir_all(dir);
    }
}
