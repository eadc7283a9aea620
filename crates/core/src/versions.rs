//! The MCP protocol versions this project speaks, defined once: what a config may ask a server
//! for, what a face accepts from a client, what a link offers in each era. No I/O.

/// The stateless era: `server/discover`, the client's identity in each request's `_meta`.
pub const STATELESS: &str = "2026-07-28";

/// The versions of the `initialize` handshake era, newest first.
pub const HANDSHAKE: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// Every version, newest first.
pub const ALL: [&str; 5] = [
    STATELESS,
    HANDSHAKE[0],
    HANDSHAKE[1],
    HANDSHAKE[2],
    HANDSHAKE[3],
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_newest_first_and_the_stateless_era_is_the_newest() {
        // The dates compare as text: a face treats any version at or past the stateless one as
        // of that era.
        assert!(ALL.windows(2).all(|w| w[0] > w[1]), "{ALL:?}");
        assert_eq!(ALL[0], STATELESS);
        assert!(HANDSHAKE.iter().all(|v| *v < STATELESS));
    }
}
