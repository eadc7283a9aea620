//! The streamable-HTTP wire of one generation (placeholder; see `wire.rs`).
