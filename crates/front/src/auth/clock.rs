//! The wall clock that a token's `exp` and `nbf` are read against: the system's, or, for
//! tests, one that starts at a given time and advances with tokio's (paused) clock.
//!
//! It only tells the time; it never sleeps and never decides what a time means.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where "now" comes from for the claims that are wall-clock times.
#[derive(Clone, Copy, Debug)]
pub enum WallClock {
    /// The system's clock: what a host uses.
    System,
    /// `start` (time since the Unix epoch) at `since`, then advancing as tokio's clock does: a
    /// test on a paused clock moves it with `tokio::time::advance`.
    Tokio {
        /// The wall time at `since`, since the Unix epoch.
        start: Duration,
        /// The tokio instant at which the wall time was `start`.
        since: tokio::time::Instant,
    },
}

impl WallClock {
    /// A clock that reads `start` (since the Unix epoch) now and advances with tokio's clock.
    pub fn following_tokio(start: Duration) -> Self {
        Self::Tokio {
            start,
            since: tokio::time::Instant::now(),
        }
    }

    /// The time now.
    pub fn now(&self) -> SystemTime {
        match self {
            Self::System => SystemTime::now(),
            Self::Tokio { start, since } => UNIX_EPOCH + *start + since.elapsed(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_tokio_clock_advances_with_tokio_time() {
        let clock = WallClock::following_tokio(Duration::from_secs(1_000));
        assert_eq!(clock.now(), UNIX_EPOCH + Duration::from_secs(1_000));
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(clock.now(), UNIX_EPOCH + Duration::from_secs(1_030));
    }
}
