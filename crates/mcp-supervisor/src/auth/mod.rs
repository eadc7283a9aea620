//! The OAuth client for protected HTTP servers (the MCP authorization spec, 2025-06-18 and
//! later): discovery from a 401, client registration, the interactive login, the token file, and
//! the run-time token source the HTTP wire asks for a bearer token.
//!
//! Built on reqwest and the crates already in the tree (sha2, base64, getrandom, url) rather
//! than rmcp's `auth` feature, which is tied to rmcp's own transport, not our wire. Nothing here
//! logs or shows a token or a client secret.

pub mod delegation;
pub mod discovery;
pub mod flow;
pub mod login;
pub mod source;
pub mod store;

pub use delegation::Delegation;
pub use source::{Credentials, TokenSource};
pub use store::{Entry, TokenStore};
